"""How a topology's processes come and go, its deployment strategy: `Launched` (this harness
spawned the launcher: every process it started is watched, one verified stop takes them all
down) or `Deployed` (something else runs it: no spawn, no teardown; a role whose health URL does
not answer is named `role_unreachable`). Each sees the topology it serves through `RunningTopology`
(observed.py) and writes nothing into it: what it learns (the tree's peak memory, the ports
the roles really got) the topology reads from it."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from harness.core.paths import (
    TOPOLOGY_ID_ENV,
    topology_marker,
)
from harness.core.role_contract import STOPPING_FILE
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.launch.plan import (
    SCRATCH_SUBDIRS,
    LaunchPlan,
)
from harness.topology.diagnoses import LogDiagnosis
from harness.topology.launcher_checks import check_launcher
from harness.topology.observed import RunningTopology
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
from harness.topology.roles import RoleTable
from harness.topology.tree_usage import tree_rss_mib


class Deployment(Protocol):
    """How a topology's processes come and go (`Launched`, `Deployed`)."""

    peak_rss_mib: float  # the largest resident memory of its processes seen (0: not seen)

    def start(self, topo: RunningTopology) -> None: ...

    def watch(self, topo: RunningTopology) -> None:
        """One look at every role (`topo.probe_workers()` included); raises at the first fault."""

    def stop(self, topo: RunningTopology, grace_s: float) -> StopReport | None: ...

    def processes(self) -> list[psutil.Process]:
        """The topology's processes this machine can see."""

    def role_log(self, role: str) -> Path | None:
        """Where a role's log is, if this machine has it."""

    def unprobed_state(self, role: str) -> str:
        """What is known of a role with no health port (the frontend, an aux process)."""

    def logged_exception(self) -> tuple[str, str] | None:
        """(role, exception line) of the last Python traceback a role logged, where seen."""

    def received_ports(self) -> dict[str, int]:
        """{worker: the system port it was really started with}, where known."""


RSS_SAMPLE_S = 1.0  # how often the tree's memory is summed (psutil walks every process)
# How often the tree's processes and groups are recorded for the stop (every process's environ is
# read: 14 ms a poll in a cProfile of a router case, 2026-12-06, on a core the engines share). A
# process that leaves its group between two records is still found by its marker at the stop.
REMEMBER_S = 1.0


class Launched:
    """Spawned here: owns the launcher's process tree, its role table and its leases."""

    def __init__(self, plan: LaunchPlan, on_release: Callable[[], None] | None = None) -> None:
        self.plan = plan
        # waits until the leased cards hold what they held at grant (GpuSlot.wait_returned, set
        # by `launch` where it leased cards): what runs on the lease before the first role (the
        # engine alone) must leave them so
        self.device_returned: Callable[[], None] = lambda: None
        self.roles = RoleTable(plan)
        self.peak_rss_mib = 0.0
        self.reaper = ProcessReaper()
        self.stop_report: StopReport | None = None
        self._on_release = on_release
        self._restore_sigterm: Callable[[], None] = lambda: None

    @property
    def marker(self) -> tuple[str, str]:
        return topology_marker(self.plan.topology_id)

    def start(self, topo: RunningTopology) -> None:
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

    def watch(self, topo: RunningTopology) -> None:
        """One poll of every process (the diagnoses) and health port."""
        launcher = self.roles.launcher
        assert launcher is not None
        if topo.due("rss", RSS_SAMPLE_S):
            self.peak_rss_mib = max(self.peak_rss_mib, tree_rss_mib(launcher))
        self.roles.refresh()
        if topo.due("remember", REMEMBER_S):
            self.reaper.remember(launcher, self.marker)
        for diagnosis in LogDiagnosis.every():
            if diagnosis.starting_only and topo.phase == "ready":
                continue
            failure = diagnosis.check(topo, self.roles)
            if failure is not None:
                raise failure
        for _ in topo.probe_workers():
            pass

    def stop(self, topo: RunningTopology, grace_s: float) -> StopReport | None:
        """One verified stop: every process this topology ever had is stopped and waited for by
        PID (survivors named), then its leased ports must be closed (a listener named with its
        holder), then its leases (and GPU memory) are given back."""
        if self.roles.launcher is None:
            self._release()  # failed before spawning (invalid launcher, squatted port)
            return None
        if self.stop_report is not None:
            return self.stop_report
        with contextlib.suppress(OSError):  # the role site's quick exit (launch/role_site/)
            (self.plan.scratch_dir / STOPPING_FILE).touch()
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

    def received_ports(self) -> dict[str, int]:
        return self.roles.received_system_ports()

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
        self.peak_rss_mib = 0.0  # its processes are not on this machine

    def start(self, topo: RunningTopology) -> None:
        pass

    def watch(self, topo: RunningTopology) -> None:
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

    def stop(self, topo: RunningTopology, grace_s: float) -> StopReport | None:
        return None

    def processes(self) -> list[psutil.Process]:
        return []

    def role_log(self, role: str) -> Path | None:
        return None

    def unprobed_state(self, role: str) -> str:
        return "not probed"

    def logged_exception(self) -> tuple[str, str] | None:
        return None

    def received_ports(self) -> dict[str, int]:
        return {}
