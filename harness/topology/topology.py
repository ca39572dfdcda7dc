"""Topology: one topology behind a plan's URLs (vLLM's `RemoteOpenAIServer`, mirakuru's
executors). It owns the URLs, the HTTP client, each role's health and counters, and the
readiness phases under one deadline; `with topo:` waits until it is ready and leaving stops it.

How its processes come and go is a strategy, its `deployment`:
- `Launched`: this harness spawned the launcher (`launch(...)`): every process it started is
  watched (the diagnoses in readiness.py), and one verified stop takes them all down.
- `Deployed`: something else runs it (Kubernetes, a colleague's box, a staging cluster;
  `attach(...)`): no spawn, no teardown; a role whose health URL does not answer is named
  (`role_unreachable`). The readiness phases, the path oracle (where metrics URLs are given),
  every oracle and the verdict causes work as for a launched topology.

A deployed topology is described by a target file (YAML):

    profile: epd_qwen3-vl-2b            # whose cases run
    tier: cpu                           # whose expectations judge them (default gpu)
    frontend: http://127.0.0.1:8000
    served_model_name: Qwen/Qwen3-VL-2B-Instruct   # default: the profile's model
    model_dir: /path/to/checkpoint      # CPU tier: the checkpoint behind the answers
    launcher_args: []                   # what the deployment was started with (cases needing
                                        # other launcher args are skipped)
    api_key_env: STAGING_API_KEY        # sent as `Authorization: Bearer …`; scrubbed
    roles:                              # every worker of the profile
      encode: {health: http://10.0.0.5:9090/health, metrics: http://10.0.0.5:9090/metrics}"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import psutil
import requests
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.core.paths import (
    SESSION_ID_ENV,
    TOPOLOGY_ID_ENV,
    marker_env,
    runs_dir,
    topology_marker,
)
from harness.core.secrets import scrub_text
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.machine.gpu_leases import take_gpus
from harness.machine.model_files import model_for
from harness.machine.port_registry import PortRegistry
from harness.profiles import CaseSpec, Profile, Tier
from harness.topology.dynamo_src import DynamoSource
from harness.topology.plan import (
    SCRATCH_SUBDIRS,
    LaunchPlan,
    RolePlan,
    check_launcher,
    contract_of,
    resolve,
)
from harness.topology.processes import (
    ProcessReaper,
    StopReport,
    foreign_listeners,
    listeners,
    listening_ports,
    marked_processes,
    spawn_in_session,
    term_raises_interrupt,
)
from harness.topology.readiness import LogDiagnosis, Phase
from harness.topology.roles import (
    FrontendTally,
    HealthSample,
    HealthTimeline,
    RoleTable,
    WorkerCounters,
    probe,
    requests_of,
    scrape,
    scrape_frontend,
    tail,
    tree_rss_mib,
)

POLL_S = 0.25
STOP_GRACE_S = 6.0
INTERRUPT_GRACE_S = 1.5  # Ctrl-C: the person is waiting


class Deployment(Protocol):
    """How a topology's processes come and go (`Launched`, `Deployed`)."""

    def start(self, topo: Topology[Any]) -> None: ...

    def watch(self, topo: Topology[Any]) -> None:
        """One look at every role (`topo.probe_workers()` included); raises at the first fault."""

    def stop(self, topo: Topology[Any], grace_s: float) -> StopReport | None: ...

    def processes(self) -> list[psutil.Process]:
        """The topology's processes this machine can see."""

    def role_log(self, role: str) -> Path | None:
        """Where a role's log is, if this machine has it."""

    def unprobed_state(self, role: str) -> str:
        """What is known of a role with no health port (the frontend, an aux process)."""

    def logged_exception(self) -> tuple[str, str] | None:
        """(role, exception line) of the last Python traceback a role logged, where seen."""


D = TypeVar("D", bound=Deployment)


class Topology(Generic[D]):
    """A topology behind a plan's URLs. `with topo:` starts it and waits until it is ready;
    leaving stops it (a deployed one: releases the client, stops nothing)."""

    def __init__(
        self, plan: LaunchPlan, phases: Sequence[Phase], deployment: D, api_key: str | None = None
    ) -> None:
        self.plan = plan
        self.phases = list(phases)
        self.deployment = deployment
        self.timeline = HealthTimeline()
        self.samples: dict[str, HealthSample] = {}
        self.phase_times: dict[str, float] = {}
        self.ready_s: float | None = None
        self.phase = "spawn"
        self.peak_rss_mib = 0.0
        self.healthy_once: set[str] = set()
        self._next_at: dict[str, float] = {}
        self._http = requests.Session()
        if api_key:
            self._http.headers["Authorization"] = f"Bearer {api_key}"

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Topology[D]:
        try:
            self.start()
            self.wait_ready()
        except BaseException as exc:
            self.stop_after(exc)
            raise
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.stop_after(exc)
        else:
            self.stop()

    def start(self) -> None:
        self.plan.log_dir.mkdir(parents=True, exist_ok=True)
        self.deployment.start(self)

    def stop(self, grace_s: float = STOP_GRACE_S) -> StopReport | None:
        """Stop what the deployment owns (verified; an unclean stop raises teardown_unclean)
        and close the client."""
        self.phase = "teardown"
        try:
            return self.deployment.stop(self, grace_s)
        finally:
            self._http.close()

    def stop_after(self, exc: BaseException) -> None:
        """Stop after `exc`; an unclean stop is added to a failure's evidence instead of
        replacing its cause. After Ctrl-C the stop is short."""
        if isinstance(exc, KeyboardInterrupt):
            self.stop(grace_s=INTERRUPT_GRACE_S)
            return
        try:
            self.stop()
        except TopologyFailure as unclean:
            if not isinstance(exc, TopologyFailure):
                raise
            exc.evidence.detail["teardown"] = unclean.message

    def wait_ready(self) -> None:
        """Run the phases in order under one deadline (`total_s`): each gets what is left and
        returns its failure; none can run past it."""
        deadline = self.timeline.start + self.plan.budget.total_s
        for phase in self.phases:
            self.phase = phase.name
            while True:
                self.watch()
                left = deadline - time.monotonic()
                failure = phase.failure(self, left)
                if failure is not None:
                    raise failure
                if phase.done(self, left):
                    self.phase_times[phase.name] = round(self.elapsed(), 3)
                    break
                time.sleep(max(0.0, min(POLL_S, left)))
        self.phase = "ready"
        self.ready_s = self.elapsed()

    # -- observation -----------------------------------------------------------------------
    def watch(self) -> None:
        """One look at every role; raises at the first fault it sees."""
        self.deployment.watch(self)

    def processes(self) -> list[psutil.Process]:
        return self.deployment.processes()

    def elapsed(self) -> float:
        return time.monotonic() - self.timeline.start

    def due(self, what: str, every_s: float) -> bool:
        """True at most once per `every_s` for `what` (throttles work a poll need not repeat)."""
        now = time.monotonic()
        if now < self._next_at.get(what, 0.0):
            return False
        self._next_at[what] = now + every_s
        return True

    def probe_workers(self) -> Iterator[tuple[RolePlan, str]]:
        """Probe each worker's health URL in turn, recording it; yields (role, probed state)."""
        for role in self.plan.workers:
            assert role.health_url is not None
            sample = probe(role.health_url, self._http)
            self.samples[role.name] = sample
            state = "no_health_source" if sample.no_health_source else sample.state
            self.timeline.record(role.name, state)
            if state == "ready":
                self.healthy_once.add(role.name)
            yield role, sample.state

    def learn_port(self, role: str, port: int) -> None:
        """The system port a worker was really started with (the role adapter's record) is where
        its health and counters are polled, whatever variable the profile expected it in."""
        if self.plan.role(role).port == port:
            return
        roles = tuple(
            dataclasses.replace(r, port=port) if r.name == role else r for r in self.plan.roles
        )
        self.plan = dataclasses.replace(self.plan, roles=roles)

    def health_state(self, role: str) -> str:
        sample = self.samples.get(role)
        return sample.state if sample else "unknown"

    def health_summary(self) -> dict[str, str]:
        out = {}
        for role in self.plan.roles:
            if role.name in self.samples:
                s = self.samples[role.name]
                out[role.name] = f"{s.state} {s.status or ''} {s.body[:160]}".strip()
            else:
                out[role.name] = self.deployment.unprobed_state(role.name)
        return out

    def role_counters(self) -> dict[str, WorkerCounters | None]:
        """Each worker's counters now (None: its /metrics did not answer)."""
        return {
            r.name: scrape(r.metrics_url, self._http) for r in self.plan.workers if r.metrics_url
        }

    def frontend_tally(self) -> FrontendTally | None:
        """The frontend's own histograms now (None: its /metrics did not answer)."""
        return scrape_frontend(self.url_for("/metrics"), self._http)

    def request_counts(self) -> dict[str, float | None]:
        """Each worker's `generate` request counter now (None: its /metrics did not answer)."""
        return requests_of(self.role_counters())

    def listed_models(self) -> list[str]:
        try:
            resp = self._http.get(self.url_for("/v1/models"), timeout=2)
            return [m["id"] for m in resp.json().get("data", [])] if resp.ok else []
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return []

    # -- clients ---------------------------------------------------------------------------
    def url_for(self, path: str) -> str:
        return f"{self.plan.frontend_url}{path}"

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response:
        """POST /v1/chat/completions; while waiting, a role's death is raised within a poll
        (the request still in flight is abandoned, not waited for).
        `timeout_s`: at most this long (default: the budget's `request_s`)."""
        body = {"model": self.plan.served_model_name, **body}
        timeout = self.plan.budget.request_s if timeout_s is None else max(timeout_s, POLL_S)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            future = pool.submit(
                self._http.post, self.url_for("/v1/chat/completions"), json=body, timeout=timeout
            )
            deadline = time.monotonic() + timeout + 1
            while True:
                try:
                    return future.result(timeout=POLL_S)
                except concurrent.futures.TimeoutError:
                    if check_roles:
                        self.watch()
                    if time.monotonic() > deadline:
                        break
                except requests.Timeout:
                    break
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        raise self.failure(
            Cause.REQUEST_TIMEOUT,
            f"no answer to a chat request within {timeout:.0f} s; roles: {self.health_summary()}",
        )

    # -- failures --------------------------------------------------------------------------
    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure:
        """The failure with its evidence. A request answered 5xx while a role logged a Python
        traceback names that role and quotes its exception line (the cause sits in its log)."""
        log_tail = ev.pop("log_tail", None)
        if cause == Cause.HTTP_ERROR and not ev.get("role"):
            logged = self.deployment.logged_exception()
            if logged is not None:
                ev["role"] = logged[0]
                message += f"; role '{logged[0]}' logged: {logged[1]}"
        role = ev.get("role")
        if log_tail is None and role:
            log_tail = self.role_log_tail(role)
        evidence = Evidence(
            phase=self.phase,
            elapsed_s=round(self.elapsed(), 2),
            health=self.health_summary(),
            log_tail=scrub_text(log_tail or "", self.plan.env),
            **ev,
        )
        return TopologyFailure(cause, message, evidence)

    def role_log(self, role: str) -> Path | None:
        return self.deployment.role_log(role)

    def role_log_tail(self, role: str, lines: int | None = None) -> str:
        """The end of a role's log worth reading, where this machine has it."""
        path = self.role_log(role)
        if path is None:
            return ""
        return tail(path) if lines is None else tail(path, lines)


RSS_SAMPLE_S = 1.0  # how often the tree's memory is summed (psutil walks every process)


class Launched:
    """Spawned here: owns the launcher's process tree, its role table and its leases."""

    def __init__(self, plan: LaunchPlan, on_release: Callable[[], None] | None = None) -> None:
        self.plan = plan
        self.roles = RoleTable(plan)
        self.reaper = ProcessReaper()
        self.stop_report: StopReport | None = None
        self._on_release = on_release
        self._restore_sigterm: Callable[[], None] = lambda: None

    @property
    def marker(self) -> tuple[str, str]:
        return topology_marker(self.plan.topology_id)

    def start(self, topo: Topology[Any]) -> None:
        # A script that launches a topology and is then SIGTERMed (CI timeout, `timeout`) must
        # still tear it down.
        self._restore_sigterm = term_raises_interrupt()
        check_launcher(self.plan)
        squatted = foreign_listeners(self.plan.ports)
        if squatted:
            raise TopologyFailure(
                Cause.PORT_IN_USE,
                "leased port(s) already have a foreign listener before launch: "
                + "; ".join(f"{name}={port} ({who})" for name, port, who in squatted),
                Evidence(phase="spawn", port=squatted[0][1]),
            )
        for sub in SCRATCH_SUBDIRS:
            (self.plan.scratch_dir / sub).mkdir(parents=True, exist_ok=True)
        self.roles.launcher = spawn_in_session(
            self.plan.argv, self.plan.env, self.roles.launcher_log, cwd=self.plan.launcher.parent
        )

    def watch(self, topo: Topology[Any]) -> None:
        """One poll of every process (the diagnoses) and health port."""
        launcher = self.roles.launcher
        assert launcher is not None
        if topo.due("rss", RSS_SAMPLE_S):
            topo.peak_rss_mib = max(topo.peak_rss_mib, tree_rss_mib(launcher))
        self.roles.refresh()
        for role, port in self.roles.received_system_ports().items():
            topo.learn_port(role, port)
        self.reaper.remember(launcher, self.marker)
        for diagnosis in LogDiagnosis.every():
            if diagnosis.starting_only and topo.phase == "ready":
                continue
            failure = diagnosis.check(topo, self.roles)
            if failure is not None:
                raise failure
        for _ in topo.probe_workers():
            pass

    def stop(self, topo: Topology[Any], grace_s: float) -> StopReport | None:
        """One verified stop: every process this topology ever had is stopped and waited for by
        PID (survivors named), then its leased ports must be closed (a listener named with its
        holder), then its leases (and GPU memory) are given back."""
        if self.roles.launcher is None:
            self._release()  # failed before spawning (invalid launcher, squatted port)
            return None
        if self.stop_report is not None:
            return self.stop_report
        self.stop_report = self.reaper.stop(self.roles.launcher, self.marker, grace_s=grace_s)
        open_ports = listening_ports(self.plan.ports.values())
        holders = {port: self.roles.owner_of(pid) for port, pid in listeners(open_ports).items()}
        shutil.rmtree(self.plan.scratch_dir, ignore_errors=True)
        survivors = [(s.pid, s.cmdline[:80]) for s in self.stop_report.survivors]
        if survivors or holders:
            unclean = topo.failure(
                Cause.TEARDOWN_UNCLEAN,
                f"survivors {survivors}, ports still listening {holders}",
            )
            with contextlib.suppress(TopologyFailure):  # the survivors are the first cause
                self._release()
            raise unclean
        self._release()
        return self.stop_report

    def _release(self) -> None:
        """Give the leases back (GPU memory checked returned), put SIGTERM back (once)."""
        self._restore_sigterm()
        self._restore_sigterm = lambda: None
        release, self._on_release = self._on_release, None
        if release:
            release()

    def processes(self) -> list[psutil.Process]:
        """Every live process of this topology: the launcher's tree and anything marked."""
        launcher = self.roles.launcher
        assert launcher is not None
        found = {p.pid: p for p in marked_processes(TOPOLOGY_ID_ENV, self.plan.topology_id)}
        with contextlib.suppress(psutil.Error):
            found.update({p.pid: p for p in [launcher, *launcher.children(recursive=True)]})
        return list(found.values())

    def role_log(self, role: str) -> Path | None:
        return self.roles.log_path(role)

    def logged_exception(self) -> tuple[str, str] | None:
        return self.roles.logged_exception()

    def unprobed_state(self, role: str) -> str:
        if role not in self.roles.known:
            return "not started"
        return "exited" if role in self.roles.exited() else "running"


# A deployed role that does not answer its health URL this long is unreachable (it is meant to
# be up already; a few seconds cover a restart between polls).
UNREACHABLE_GRACE_S = 5.0


class Deployed:
    """Run by something else: its roles are watched through their health URLs only, and
    leaving stops nothing."""

    def __init__(self) -> None:
        self._down_since: dict[str, float] = {}

    def start(self, topo: Topology[Any]) -> None:
        pass

    def watch(self, topo: Topology[Any]) -> None:
        """Probe every worker's health URL; one that does not answer is named."""
        now = time.monotonic()
        for role, state in topo.probe_workers():
            if state != "down":
                self._down_since.pop(role.name, None)
                continue
            since = self._down_since.setdefault(role.name, now)
            if role.name in topo.healthy_once or now - since > UNREACHABLE_GRACE_S:
                raise topo.failure(
                    Cause.ROLE_UNREACHABLE,
                    f"deployed role '{role.name}' does not answer {role.health_url} "
                    f"({'after it was healthy' if role.name in topo.healthy_once else 'at all'})",
                    role=role.name,
                )

    def stop(self, topo: Topology[Any], grace_s: float) -> StopReport | None:
        return None

    def processes(self) -> list[psutil.Process]:
        return []

    def role_log(self, role: str) -> Path | None:
        return None

    def unprobed_state(self, role: str) -> str:
        return "not probed"

    def logged_exception(self) -> tuple[str, str] | None:
        return None


class TargetError(ValueError):
    """A target file that cannot be used; the message names the file and field."""


class TargetRole(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    health: str
    metrics: str | None = None


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    profile: str
    tier: Tier = "gpu"
    frontend: str
    served_model_name: str | None = None
    model_dir: str | None = None
    launcher_args: list[str] = []
    api_key_env: str | None = None
    roles: dict[str, TargetRole]


def load_target(path: Path) -> TargetSpec:
    try:
        raw = yaml.safe_load(path.read_text())
        return TargetSpec.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise TargetError(f"{path}: {exc}") from None
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join(map(str, e['loc'])) or '<top>'}: {e['msg']}" for e in exc.errors()
        ]
        raise TargetError("\n".join(lines)) from None


def check_target(spec: TargetSpec, profile: Profile, path: Path) -> None:
    """The target names every worker of its profile, and no other role."""
    workers = {r.name for r in profile.worker_roles}
    missing, extra = sorted(workers - set(spec.roles)), sorted(set(spec.roles) - workers)
    problems = (
        [f"{path}: roles: {profile.name}'s workers {missing} have no URLs"] if missing else []
    )
    problems += [f"{path}: roles: {extra} are not workers of {profile.name}"] if extra else []
    if spec.tier == "cpu" and not spec.model_dir:
        problems.append(f"{path}: model_dir: the CPU tier judges answers against the checkpoint")
    if problems:
        raise TargetError("\n".join(problems))


def target_plan(spec: TargetSpec, profile: Profile, run_dir: Path) -> LaunchPlan:
    tier_spec = profile.tier(spec.tier)
    if tier_spec is None:
        raise TargetError(f"profile {profile.name} has no {spec.tier} tier")
    roles = tuple(
        RolePlan(
            r.name,
            r.kind,
            None,
            r.discovery_component,
            health=spec.roles[r.name].health,
            metrics=spec.roles[r.name].metrics,
        )
        if r.name in spec.roles
        else RolePlan(r.name, r.kind, None)
        for r in profile.roles
    )
    env = dict(os.environ)
    return LaunchPlan(
        profile=profile.name,
        tier=spec.tier,
        launcher=Path("/dev/null"),
        args=tuple(spec.launcher_args),
        model=spec.model_dir or profile.model.gpu,
        served_model_name=spec.served_model_name or profile.model.gpu,
        roles=roles,
        ports={},
        run_dir=run_dir,
        scratch_dir=run_dir / "scratch",
        budget=tier_spec.budget,
        topology_id=f"target-{profile.name}",
        signature=f"target-{profile.name}",
        env=env,
        frontend=spec.frontend,
    )


def attach(
    plan: LaunchPlan, warmups: Sequence[dict[str, Any]], api_key: str | None
) -> Topology[Deployed]:
    """A deployed topology not yet entered: `with attach(...) as topo:` waits until it is
    ready (no spawn); leaving stops nothing."""
    phases = Phase.for_topology(plan, launched=False, warmups=warmups)
    return Topology(plan, phases, Deployed(), api_key)


@functools.cache
def session_id() -> str:
    """This process's session: $HARNESS_SESSION_ID where a caller names it, else a new one
    (the same for every topology this process launches)."""
    return os.environ.get(SESSION_ID_ENV) or uuid.uuid4().hex[:12]


def new_run_dir(profile: Profile, tier: Tier) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_dir() / session_id() / f"{profile.name}-{tier}-{stamp}-{uuid.uuid4().hex[:4]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(
    profile: Profile,
    tier: Tier,
    case: CaseSpec,
    warmups: Sequence[dict[str, Any]] = (),
    registry: PortRegistry | None = None,
    base_env: dict[str, str] | None = None,
) -> Topology[Launched]:
    """A topology not yet entered: `with launch(...) as topo:` starts it and waits until ready."""
    registry = registry or PortRegistry()
    topology_id = uuid.uuid4().hex
    tag = f"{profile.name}:{topology_id[:8]}"
    gpus = take_gpus(profile, tag) if tier == "gpu" else None
    if gpus is not None:
        base_env = {**(os.environ if base_env is None else base_env), **gpus.env()}
    contract = contract_of(profile, DynamoSource.from_env(base_env))
    lease = registry.lease(list(contract.singles), tag=tag, runs=contract.runs)

    def release() -> None:
        lease.release()
        if gpus is not None:
            gpus.release()

    try:
        plan = resolve(
            profile,
            tier,
            case,
            ports=lease.ports,
            run_dir=new_run_dir(profile, tier),
            scratch_dir=Path(tempfile.gettempdir()) / f"harness-{topology_id[:12]}",
            model=model_for(profile, tier),
            topology_id=topology_id,
            marker_env=marker_env(topology_id, session_id(), os.getpid()),
            base_env=base_env,
        )
    except BaseException:
        release()
        raise
    phases = Phase.for_topology(plan, launched=True, warmups=warmups)
    return Topology(plan, phases, Launched(plan, on_release=release))
