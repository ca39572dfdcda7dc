"""Topology: a running LaunchPlan. Enter = spawn + phased readiness; exit = verified teardown."""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psutil
import requests

from harness.core.markers import TOPOLOGY_ID_ENV, topology_marker
from harness.core.secrets import scrub_text
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.runtime.footprint import tree_rss_mib
from harness.runtime.generate_counter import WorkerCounters, requests_of, scrape
from harness.runtime.health import HealthSample, HealthTimeline, probe
from harness.runtime.launch_env import SCRATCH_SUBDIRS
from harness.runtime.launcher_check import check_launcher
from harness.runtime.listeners import foreign_listeners, listeners, listening_ports
from harness.runtime.plan import LaunchPlan, RolePlan
from harness.runtime.processes import (
    ProcessReaper,
    StopReport,
    marked_processes,
    spawn_in_session,
)
from harness.runtime.readiness import Phase, default_phases
from harness.runtime.roles import RoleTable, tail
from harness.runtime.signal_handlers import term_raises_interrupt

POLL_S = 0.25
STOP_GRACE_S = 6.0
INTERRUPT_GRACE_S = 1.5
PORT_IN_USE_HINTS = ("Address already in use", "address in use", "EADDRINUSE")
# What a Dynamo 1.6.1 worker logs when its system port is taken; it then runs on without /health.
HEALTH_SERVER_FAILED = "System status server startup failed"
HEALTH_BIND_FAILED = re.compile(r"Failed to bind to address [\d.]+:(\d+)")


class Topology:
    """Owns the launcher process tree of one plan. Use as a context manager."""

    def __init__(
        self,
        plan: LaunchPlan,
        warmups: Sequence[dict[str, Any]] = (),
        phases: Sequence[Phase] | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self.phases = (
            list(phases)
            if phases is not None
            else default_phases(warmups, dynamo_src=plan.dynamo_src is not None)
        )
        self.timeline = HealthTimeline()
        self.roles = RoleTable(plan)
        self.reaper = ProcessReaper()
        self.popen: psutil.Popen | None = None
        self.samples: dict[str, HealthSample] = {}
        self.phase_times: dict[str, float] = {}
        self.ready_s: float | None = None
        self.stop_report: StopReport | None = None
        self.phase = "spawn"
        self.peak_rss_mib = 0.0
        self._polls = 0
        self._all_started = False
        self._healthy_once: set[str] = set()
        self._on_release = on_release
        self._http = requests.Session()
        self._restore_sigterm: Callable[[], None] = lambda: None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Topology:
        try:
            self.start()
            self.wait_ready()
        except KeyboardInterrupt:
            self.stop(grace_s=INTERRUPT_GRACE_S)
            raise
        except BaseException as exc:
            self._stop_keeping(exc)
            raise
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, TopologyFailure):
            self._stop_keeping(exc)
        else:
            self.stop()

    def _stop_keeping(self, exc: BaseException) -> None:
        """Stop after a failure; an unclean teardown is added to that failure's evidence
        instead of replacing its cause."""
        try:
            self.stop()
        except TopologyFailure as unclean:
            if not isinstance(exc, TopologyFailure):
                raise
            exc.evidence.detail["teardown"] = unclean.message

    def start(self) -> None:
        # A script that launches a topology and is then SIGTERMed (CI timeout, `timeout`) must
        # still tear it down: seen with bench/teardown_speed.py under `timeout`.
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
        self.plan.log_dir.mkdir(parents=True, exist_ok=True)
        for sub in SCRATCH_SUBDIRS:
            (self.plan.scratch_dir / sub).mkdir(parents=True, exist_ok=True)
        self.timeline = HealthTimeline()
        self.popen = spawn_in_session(
            self.plan.argv, self.plan.env, self.roles.launcher_log, cwd=self.plan.launcher.parent
        )

    def wait_ready(self) -> None:
        """Run the phases in order; each decides when it is done and when it has failed."""
        for phase in self.phases:
            self.phase = phase.name
            while True:
                self.watch()
                if phase.done(self):
                    self.phase_times[phase.name] = round(self.elapsed(), 3)
                    break
                failure = phase.overdue(self)
                if failure is not None:
                    raise failure
                time.sleep(POLL_S)
        self.phase = "ready"
        self.ready_s = self.elapsed()

    def stop(self, grace_s: float = STOP_GRACE_S) -> StopReport | None:
        """SIGTERM every group, SIGKILL after `grace_s`, sweep the marker, verify ports closed."""
        if self.popen is None:
            self._release()  # failed before spawning (invalid launcher, squatted port)
            return None
        if self.stop_report is not None:
            return self.stop_report
        self.phase = "teardown"
        marker = topology_marker(self.plan.topology_id)
        self.stop_report = self.reaper.stop(self.popen, marker, grace_s=grace_s)
        listening = listening_ports(self.plan.ports.values())
        shutil.rmtree(self.plan.scratch_dir, ignore_errors=True)
        self._release()
        if self.stop_report.survivors or listening:
            raise self.failure(
                Cause.TEARDOWN_UNCLEAN,
                f"survivors {[(s.pid, s.cmdline[:80]) for s in self.stop_report.survivors]}, "
                f"ports still listening {listening}",
            )
        return self.stop_report

    def _release(self) -> None:
        """Give the leases back, close the HTTP session, put SIGTERM back (once)."""
        self._http.close()
        self._restore_sigterm()
        self._restore_sigterm = lambda: None
        release, self._on_release = self._on_release, None
        if release:
            release()

    # -- observation -----------------------------------------------------------------------
    def processes(self) -> list[psutil.Process]:
        """Every live process of this topology: the launcher's tree and anything marked."""
        assert self.popen is not None
        found = {p.pid: p for p in marked_processes(TOPOLOGY_ID_ENV, self.plan.topology_id)}
        with contextlib.suppress(psutil.Error):
            found.update({p.pid: p for p in [self.popen, *self.popen.children(recursive=True)]})
        return list(found.values())

    def elapsed(self) -> float:
        return time.monotonic() - self.timeline.start

    def watch(self) -> None:
        """One poll of every process and health port; raises at the first fault it sees."""
        assert self.popen is not None
        self._polls += 1
        if self._polls % 4 == 1:
            self.peak_rss_mib = max(self.peak_rss_mib, tree_rss_mib(self.popen))
        self.roles.refresh()
        self.reaper.remember_groups(self.popen, topology_marker(self.plan.topology_id))
        for name in self.roles.exited():
            self.timeline.record(name, "exited")
            raise self.role_exited(name)
        if self.phase != "ready":
            self.check_roles_started()
            if self._polls % 4 == 1:
                self.check_health_servers()
        code = self.popen.poll()
        if code is not None:
            raise self.failure(
                Cause.LAUNCHER_EXITED,
                f"launcher {self.plan.launcher.name} exited with code {code} before "
                f"{'ready' if self.phase != 'ready' else 'the test ended'}",
                log_tail=tail(self.roles.launcher_log),
                exit_code=code,
            )
        for _ in self.probe_workers():
            pass

    def probe_workers(self) -> Iterator[tuple[RolePlan, str]]:
        """Probe each worker's health URL in turn, recording it; yields (role, probed state)."""
        for role in self.plan.workers:
            assert role.health_url is not None
            sample = probe(role.health_url, self._http)
            self.samples[role.name] = sample
            state = "no_health_source" if sample.no_health_source else sample.state
            self.timeline.record(role.name, state)
            if state == "ready":
                self._healthy_once.add(role.name)
            yield role, sample.state

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
                if role.name not in self.roles.known:
                    out[role.name] = "not started"
                else:
                    out[role.name] = "exited" if role.name in self.roles.exited() else "running"
        return out

    def role_counters(self) -> dict[str, WorkerCounters | None]:
        """Each worker's counters now (None: its /metrics did not answer)."""
        return {
            r.name: scrape(r.metrics_url, self._http) for r in self.plan.workers if r.metrics_url
        }

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

    def post_chat(self, body: dict[str, Any], check_roles: bool = True) -> requests.Response:
        """POST /v1/chat/completions; while waiting, a role death is reported within a poll."""
        body = {"model": self.plan.served_model_name, **body}
        timeout = self.plan.budget.request_s
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
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
        raise self.failure(
            Cause.REQUEST_TIMEOUT,
            f"no answer to a chat request within {timeout:.0f} s; roles: {self.health_summary()}",
        )

    # -- failures --------------------------------------------------------------------------
    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure:
        log_tail = ev.pop("log_tail", None)
        role = ev.get("role")
        if log_tail is None and role:
            log_tail = tail(self.roles.log_path(role))
        evidence = Evidence(
            phase=self.phase,
            elapsed_s=round(self.elapsed(), 2),
            health=self.health_summary(),
            log_tail=scrub_text(log_tail or "", self.plan.env),
            **ev,
        )
        return TopologyFailure(cause, message, evidence)

    def check_roles_started(self) -> None:
        """A role the profile declares but the launcher never started (no start_role for it, a
        typo in its name) is named as soon as the launcher has started the others."""
        if self._all_started:
            return
        report = self.roles.never_started()
        if report is None:
            return
        missing, started = report
        if missing:
            raise self.failure(
                Cause.ROLE_NOT_STARTED,
                f"the launcher started {started} and is waiting on them, but the profile "
                f"declares {missing} too: no `start_role {missing[0]} …` in "
                f"{self.plan.launcher.name} (or its name differs)",
                role=missing[0],
                log_tail=tail(self.roles.launcher_log),
            )
        self._all_started = True

    def check_health_servers(self) -> None:
        """A worker whose system port was taken keeps running without a health server (Dynamo
        logs the bind error and goes on): name it, the port and its holder at once, instead of
        waiting out register_s for a /health that can never answer."""
        for role in self.plan.workers:
            if role.name in self._healthy_once or role.name not in self.roles.known:
                continue
            text = tail(self.roles.log_path(role.name), 200)
            if HEALTH_SERVER_FAILED not in text:
                continue
            bind = HEALTH_BIND_FAILED.search(text)
            port = int(bind.group(1)) if bind else role.port
            holder = self.roles.owner_of(listeners([port or 0]).get(port or 0))
            planned = "" if port == role.port else f", not its planned {role.port}"
            raise self.failure(
                Cause.PORT_IN_USE,
                f"worker '{role.name}' runs without a health server: it tried system port "
                f"{port} ({self.plan.port_name(port)}{planned}), which is held by {holder}; "
                f"its log: {HEALTH_SERVER_FAILED}",
                role=role.name,
                port=port,
            )

    def role_exited(self, name: str) -> TopologyFailure:
        log = tail(self.roles.log_path(name))
        code = self.roles.exit_code(name)
        cause = Cause.PORT_IN_USE if any(h in log for h in PORT_IN_USE_HINTS) else Cause.ROLE_EXITED
        where = "before ready" if self.phase != "ready" else "mid-test"
        return self.failure(
            cause,
            f"role '{name}' exited {where} (code {code if code is not None else 'unknown'})"
            + (": a port it needs is taken" if cause == Cause.PORT_IN_USE else ""),
            role=name,
            exit_code=code,
            log_tail=log,
        )
