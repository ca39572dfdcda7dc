"""LaunchedTopology: a served topology this harness spawned (mirakuru's executor): it adds the
spawn, the watch of every process it started (log diagnoses, log_diagnoses.py) and one
verified stop."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from harness.core.markers import TOPOLOGY_ID_ENV, topology_marker
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.runtime.footprint import tree_rss_mib
from harness.runtime.launch_env import SCRATCH_SUBDIRS
from harness.runtime.launcher_check import check_launcher
from harness.runtime.listeners import foreign_listeners, listeners, listening_ports
from harness.runtime.log_diagnoses import DIAGNOSES
from harness.runtime.plan import LaunchPlan
from harness.runtime.processes import ProcessReaper, StopReport, marked_processes, spawn_in_session
from harness.runtime.readiness import Phase, default_phases
from harness.runtime.roles import RoleTable
from harness.runtime.served import ServedTopology
from harness.runtime.signal_handlers import term_raises_interrupt

STOP_GRACE_S = 6.0
INTERRUPT_GRACE_S = 1.5
RSS_SAMPLE_S = 1.0  # how often the tree's memory is summed (psutil walks every process)


class LaunchedTopology(ServedTopology):
    """Owns the launcher process tree of one plan. Use as a context manager."""

    def __init__(
        self,
        plan: LaunchPlan,
        warmups: Sequence[dict[str, Any]] = (),
        phases: Sequence[Phase] | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        if phases is None:
            phases = default_phases(warmups, plan.dynamo_src is not None, plan.loopback_only)
        super().__init__(plan, phases)
        self.roles = RoleTable(plan)
        self.reaper = ProcessReaper()
        self.popen: psutil.Popen | None = None
        self.stop_report: StopReport | None = None
        self.all_started = False
        self._next_at: dict[str, float] = {}
        self._on_release = on_release
        self._restore_sigterm: Callable[[], None] = lambda: None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> LaunchedTopology:
        super().__enter__()
        return self

    def stop_after(self, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: stop at once, the person is waiting
            self.stop(grace_s=INTERRUPT_GRACE_S)
            return
        super().stop_after(exc)

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
        self.popen = spawn_in_session(
            self.plan.argv, self.plan.env, self.roles.launcher_log, cwd=self.plan.launcher.parent
        )

    def stop(self, grace_s: float = STOP_GRACE_S) -> StopReport | None:  # type: ignore[override]
        """One verified stop: every process this topology ever had is stopped and waited for by
        PID (survivors named), then its leased ports must be closed (a listener named with its
        holder), then its leases (and GPU memory) are given back."""
        if self.popen is None:
            self._release()  # failed before spawning (invalid launcher, squatted port)
            return None
        if self.stop_report is not None:
            return self.stop_report
        self.phase = "teardown"
        self.stop_report = self.reaper.stop(self.popen, self.marker, grace_s=grace_s)
        holders = {port: self.roles.owner_of(pid) for port, pid in
                   listeners(listening_ports(self.plan.ports.values())).items()}  # fmt: skip
        shutil.rmtree(self.plan.scratch_dir, ignore_errors=True)
        survivors = [(s.pid, s.cmdline[:80]) for s in self.stop_report.survivors]
        if survivors or holders:
            unclean = self.failure(Cause.TEARDOWN_UNCLEAN, f"survivors {survivors}, ports still "
                                   f"listening {holders}")  # fmt: skip
            with contextlib.suppress(TopologyFailure):  # the survivors are the first cause
                self._release()
            raise unclean
        self._release()
        return self.stop_report

    def _release(self) -> None:
        """Give the leases back (GPU memory checked returned), close the client, put SIGTERM
        back (once)."""
        super().stop()
        self._restore_sigterm()
        self._restore_sigterm = lambda: None
        release, self._on_release = self._on_release, None
        if release:
            release()

    # -- observation -----------------------------------------------------------------------
    @property
    def marker(self) -> tuple[str, str]:
        return topology_marker(self.plan.topology_id)

    def processes(self) -> list[psutil.Process]:
        """Every live process of this topology: the launcher's tree and anything marked."""
        assert self.popen is not None
        found = {p.pid: p for p in marked_processes(TOPOLOGY_ID_ENV, self.plan.topology_id)}
        with contextlib.suppress(psutil.Error):
            found.update({p.pid: p for p in [self.popen, *self.popen.children(recursive=True)]})
        return list(found.values())

    def due(self, what: str, every_s: float) -> bool:
        """True at most once per `every_s` for `what` (throttles work a poll need not repeat)."""
        now = time.monotonic()
        if now < self._next_at.get(what, 0.0):
            return False
        self._next_at[what] = now + every_s
        return True

    def watch(self) -> None:
        """One poll of every process and health port; raises at the first fault it sees."""
        assert self.popen is not None
        if self.due("rss", RSS_SAMPLE_S):
            self.peak_rss_mib = max(self.peak_rss_mib, tree_rss_mib(self.popen))
        self.roles.refresh()
        self.reaper.remember(self.popen, self.marker)
        for diagnosis in DIAGNOSES:
            if diagnosis.starting_only and self.phase == "ready":
                continue
            failure = diagnosis.check(self)
            if failure is not None:
                raise failure
        super().watch()

    def unprobed_state(self, role: str) -> str:
        if role not in self.roles.known:
            return "not started"
        return "exited" if role in self.roles.exited() else "running"

    def role_log(self, role: str) -> Path | None:
        return self.roles.log_path(role)
