"""Topology: one topology behind a plan's URLs (vLLM's `RemoteOpenAIServer`, mirakuru's
executors). It owns the URLs, the HTTP client, each role's health and counters, and the
readiness phases under one deadline; `with topo:` waits until it is ready and leaving stops it.

How its processes come and go is a strategy, its `deployment`:
- `Launched`: this harness spawned the launcher (`launch(...)`): every process it started is
  watched (the diagnoses in diagnoses.py), and one verified stop takes them all down.
- `Deployed`: something else runs it (Kubernetes, a colleague's box, a staging cluster;
  `attach(...)`): no spawn, no teardown; a role whose health URL does not answer is named
  (`role_unreachable`). The readiness phases, the path oracle (where metrics URLs are given),
  every oracle and the verdict causes work as for a launched topology.

A deployed topology is described by a target file (harness/launch/target.py)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import psutil
import requests

from harness.core.paths import (
    SESSION_ID_ENV,
    marker_env,
    runs_dir,
)
from harness.core.secrets import scrub_text
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import (
    LaunchPlan,
    RolePlan,
    resolve,
)
from harness.machine.gpu_leases import take_gpus
from harness.machine.model_files import model_for
from harness.machine.port_registry import PortRegistry
from harness.profiles import Tier
from harness.topology.deployments import Deployed, Deployment, Launched
from harness.topology.discovery import instance_components
from harness.topology.health import HealthSample, HealthTimeline, probe
from harness.topology.held_request import HeldRequest
from harness.topology.log_tail import tail
from harness.topology.phases import Phase
from harness.topology.processes import (
    StopReport,
)
from harness.topology.role_metrics import (
    FrontendTally,
    WorkerCounters,
    requests_of,
    scrape,
    scrape_frontend,
)

POLL_S = 0.25
STOP_GRACE_S = 6.0
INTERRUPT_GRACE_S = 1.5  # Ctrl-C: the person is waiting


D = TypeVar("D", bound=Deployment)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Dynamo 1.6.1's frontend, when a worker answers a routed request with an error.
ROUTE_FAILED = re.compile(r"route request failed.*?error\.type=\"?(\w+)\"?.*?worker_id=(\d+)")


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
        self.healthy_once: set[str] = set()
        self._next_at: dict[str, float] = {}
        # seconds its chat requests took to be answered, sent to answer (a held one: open to
        # close): the system's serving time, told apart from the harness's own
        self.answering_s = 0.0
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
        # "since the topology started": not since it was resolved (what ran on its lease before
        # its first process, the engine alone, counts against no readiness budget)
        self.timeline.start = time.monotonic()
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
        for role, port in self.deployment.received_ports().items():
            self.learn_port(role, port)
        self.deployment.watch(self)

    @property
    def peak_rss_mib(self) -> float:
        """The largest resident memory of its processes its deployment saw (0: not seen)."""
        return self.deployment.peak_rss_mib

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
            dataclasses.replace(r, port=port, planned=r.planned_port) if r.name == role else r
            for r in self.plan.roles
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
        sent = time.monotonic()
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
            self.answering_s += time.monotonic() - sent
            pool.shutdown(wait=False, cancel_futures=True)
        raise self.failure(
            Cause.REQUEST_TIMEOUT,
            f"no answer to a chat request within {timeout:.0f} s; roles: {self.health_summary()}",
        )

    def held_chat(self, body: dict[str, Any]) -> HeldRequest:
        """POST /v1/chat/completions streamed and held open until closed (`with`): the worker
        that took it stays busy meanwhile."""
        body = {"model": self.plan.served_model_name, **body}
        url = self.url_for("/v1/chat/completions")
        return HeldRequest(self._http, url, body, self.plan.budget.request_s, self._held_for)

    def _held_for(self, seconds: float) -> None:
        self.answering_s += seconds

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
            elif (rejected := self.rejected_by()) is not None:
                ev["role"] = rejected[0]
                message += f"; the frontend's router says worker '{rejected[0]}' {rejected[1]}"
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

    def rejected_by(self) -> tuple[str, str] | None:
        """The worker the frontend's router last sent a request that came back as a backend
        error (its log: "route request failed … error.type=… worker_id=N"), by the component
        its instance registered (discovery) and the role the profile gives that component."""
        frontend = next((r.name for r in self.plan.roles if r.kind == "frontend"), None)
        kv_dir = self.plan.discovery_dir
        if frontend is None or kv_dir is None:
            return None
        text = ANSI.sub("", self.role_log_tail(frontend, 400))
        failed = ROUTE_FAILED.findall(text)
        if not failed:
            return None
        error, instance = failed[-1]
        component = instance_components(kv_dir).get(int(instance))
        roles = [r.name for r in self.plan.workers if r.discovery_component == component]
        if len(roles) != 1:
            return None
        return roles[0], f"failed it ({error}, instance {instance} of component {component})"

    def role_log(self, role: str) -> Path | None:
        return self.deployment.role_log(role)

    def role_log_tail(self, role: str, lines: int | None = None) -> str:
        """The end of a role's log worth reading, where this machine has it."""
        path = self.role_log(role)
        if path is None:
            return ""
        return tail(path) if lines is None else tail(path, lines)


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


def new_run_dir(name: str, tier: Tier) -> Path:
    """A fresh run dir (logs, timeline) for a launch of the profile `name`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_dir() / session_id() / f"{name}-{tier}-{stamp}-{uuid.uuid4().hex[:4]}"
    path.mkdir(parents=True, exist_ok=True)
    point_latest(path.parent)
    return path


def point_latest(session_dir: Path) -> None:
    """runs/latest -> the last session that launched, replaced atomically (a rename)."""
    latest = session_dir.parent / "latest"
    if latest.is_symlink() and os.readlink(latest) == session_dir.name:
        return
    fresh = latest.with_name(f".latest-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        fresh.unlink()
    fresh.symlink_to(session_dir.name)
    fresh.replace(latest)


def launch(
    spec: LaunchSpec,
    warmups: Sequence[dict[str, Any]] = (),
    registry: PortRegistry | None = None,
    base_env: dict[str, str] | None = None,
) -> Topology[Launched]:
    """A topology not yet entered: `with launch(...) as topo:` starts it and waits until ready."""
    registry = registry or PortRegistry()
    topology_id = uuid.uuid4().hex
    tag = f"{spec.name}:{topology_id[:8]}"
    gpus = take_gpus(spec, tag) if spec.tier == "gpu" else None
    if gpus is not None:
        base_env = {**(os.environ if base_env is None else base_env), **gpus.env()}
    contract = spec.port_contract
    lease = registry.lease(list(contract.singles), tag=tag, runs=contract.runs)

    def release() -> None:
        lease.release()
        if gpus is not None:
            gpus.release()

    try:
        plan = resolve(
            spec,
            ports=lease.ports,
            run_dir=new_run_dir(spec.name, spec.tier),
            scratch_dir=Path(tempfile.gettempdir()) / f"harness-{topology_id[:12]}",
            model=model_for(spec.model, spec.tier),
            topology_id=topology_id,
            marker_env=marker_env(topology_id, session_id(), os.getpid()),
            base_env=base_env,
        )
    except BaseException:
        release()
        raise
    phases = Phase.for_topology(plan, launched=True, warmups=warmups)
    deployed = Launched(plan, on_release=release)
    if gpus is not None:
        deployed.device_returned = gpus.wait_returned
    return Topology(plan, phases, deployed)
