"""Refuse a launcher that cannot run, before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.verdict import Cause, TopologyFailure
from harness.runtime.dynamo_src import CHECKOUT_LAUNCHER, unread_port_vars
from harness.runtime.plan import EVENT_BROKER_PORTS, FRONTEND_PORT, LaunchPlan


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
    if plan.dynamo_src is not None and path == CHECKOUT_LAUNCHER:
        check_checkout_launcher(plan)


def check_checkout_launcher(plan: LaunchPlan) -> None:
    """A Dynamo checkout's launcher exists and reads the port variables its profile leases."""
    assert plan.dynamo_src is not None
    script = Path(plan.args[0])
    if not script.is_file():
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"no launcher {script} in the Dynamo "
                              f"checkout {plan.dynamo_src.root}")  # fmt: skip
    ours = set(EVENT_BROKER_PORTS) | {FRONTEND_PORT}  # the broker's; the frontend reads its own
    leased = [name for name in plan.ports if name not in ours]
    unread = unread_port_vars(script, plan.dynamo_src.root, leased)
    if unread:
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"{script} never reads {unread}: the "
                              "harness leases them for it (the profile's health ports and side "
                              "ports must be the variables that launcher reads)")  # fmt: skip
