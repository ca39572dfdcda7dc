"""The env markers every process of a launched topology carries (docs/contracts.md): stops and
sweeps find processes by them, never by name."""

from __future__ import annotations

from harness.core.paths import REPO_ROOT

TOPOLOGY_ID_ENV = "HARNESS_TOPOLOGY_ID"  # unique per launched topology
SESSION_ID_ENV = "HARNESS_SESSION_ID"  # unique per pytest session / CLI invocation
SESSION_PID_ENV = "HARNESS_SESSION_PID"  # the process that owns the session
CHECKOUT_ENV = "HARNESS_CHECKOUT"  # the repo root that launched it: sweeps touch only ours

EnvMarker = tuple[str, str]


def marker_env(topology_id: str, session_id: str, session_pid: int) -> dict[str, str]:
    return {
        TOPOLOGY_ID_ENV: topology_id,
        SESSION_ID_ENV: session_id,
        SESSION_PID_ENV: str(session_pid),
        CHECKOUT_ENV: str(REPO_ROOT),
    }


def topology_marker(topology_id: str) -> EnvMarker:
    return (TOPOLOGY_ID_ENV, topology_id)
