"""Refuse a launcher that cannot run, before anything starts."""

from __future__ import annotations

import os

from harness.core.verdict import Cause, TopologyFailure
from harness.runtime.plan import LaunchPlan


def check_launcher(plan: LaunchPlan) -> None:
    path = plan.launcher
    if not path.is_file():
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"launcher {path} does not exist")
    if not os.access(path, os.X_OK):
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"launcher {path} is not executable")
    first = path.read_bytes()[:64].split(b"\n", 1)[0]
    if not first.startswith(b"#!") or b"bash" not in first:
        raise TopologyFailure(
            Cause.LAUNCHER_INVALID, f"launcher {path} has no bash shebang (first line {first!r})"
        )
