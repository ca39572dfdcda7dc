"""The one view of a running topology, `RunningTopology`: what readiness phases, log diagnoses,
deployments and the case loop see of it (`topology.Topology` implements it, so none of them
imports the topology it serves), and the role files they read through it (the pid each role's
launcher wrote)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import psutil
import requests

from harness.core.verdict import Cause, TopologyFailure
from harness.launch.plan import LaunchPlan, RolePlan
from harness.topology.health import HealthSample, HealthTimeline
from harness.topology.held_request import HeldRequest
from harness.topology.role_metrics import FrontendTally, WorkerCounters


class RunningTopology(Protocol):
    """What a phase, a diagnosis, a deployment or the case loop may look at and do: the running
    topology as `topology.Topology` exposes it. Nothing outside the topology writes into it."""

    plan: LaunchPlan
    timeline: HealthTimeline
    samples: dict[str, HealthSample]
    phase_times: dict[str, float]
    phase: str
    healthy_once: set[str]

    def elapsed(self) -> float: ...

    def due(self, what: str, every_s: float) -> bool: ...

    def health_state(self, role: str) -> str: ...

    def health_summary(self) -> dict[str, str]: ...

    def probe_workers(self) -> Iterator[tuple[RolePlan, str]]: ...

    def listed_models(self) -> list[str]: ...

    def request_counts(self) -> dict[str, float | None]: ...

    def role_counters(self) -> dict[str, WorkerCounters | None]: ...

    def frontend_tally(self) -> FrontendTally | None: ...

    def role_log(self, role: str) -> Path | None: ...

    def processes(self) -> list[psutil.Process]: ...

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response: ...

    def held_chat(self, body: dict[str, Any]) -> HeldRequest: ...

    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure: ...


def role_of_pid(plan: LaunchPlan, proc: psutil.Process | None) -> str | None:
    """The role whose process (NAME.pid) is `proc` or one of its ancestors."""
    pids = {role_pid(plan.log_dir, r.name): r.name for r in plan.roles}
    with contextlib.suppress(psutil.Error):
        while proc is not None:
            if proc.pid in pids:
                return pids[proc.pid]
            proc = proc.parent()
    return None


def role_pid(log_dir: Path, role: str) -> int | None:
    """The pid the launcher wrote for a role (launchers/lib/common.sh start_role)."""
    try:
        return int((log_dir / f"{role}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
