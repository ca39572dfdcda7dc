"""Refuse a launcher that cannot run, before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.profiles.launcher_files import text_with_used_files
from harness.profiles.launcher_ports import fixed_ports, launcher_port_vars
from harness.runtime.dynamo_src import CHECKOUT_LAUNCHER
from harness.runtime.listeners import foreign_listeners
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
    if plan.dynamo_src is not None and path == CHECKOUT_LAUNCHER:
        check_checkout_launcher(plan)
    check_fixed_ports(plan)


def check_checkout_launcher(plan: LaunchPlan) -> None:
    """A Dynamo checkout's launcher exists and reads the health port of every worker role."""
    assert plan.dynamo_src is not None
    script = Path(plan.args[0])
    if not script.is_file():
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"no launcher {script} in the Dynamo "
                              f"checkout {plan.dynamo_src.root}")  # fmt: skip
    read = set(launcher_port_vars(text_with_used_files(script)))
    unread = [plan.port_name(r.port) for r in plan.workers if plan.port_name(r.port) not in read]
    if unread:
        raise TopologyFailure(Cause.LAUNCHER_INVALID, f"{script} never reads {unread}: the "
                              "profile names them as its workers' health ports (it reads "
                              f"{sorted(read)})")  # fmt: skip


def check_fixed_ports(plan: LaunchPlan) -> None:
    """A port the launcher writes as a number cannot be leased or moved: if something already
    listens there, name the port, the text that binds it and its holder before anything starts."""
    script = Path(plan.args[0]) if plan.launcher == CHECKOUT_LAUNCHER else plan.launcher
    fixed = {f.where: f.port for f in fixed_ports(text_with_used_files(script))}
    for where, port, holder in foreign_listeners(fixed):
        raise TopologyFailure(
            Cause.PORT_IN_USE,
            f"{script.name} binds port {port} ({where}) with no variable to move it, and it is "
            f"held by {holder}: free it, or make the launcher read the port from a variable",
            Evidence(phase="spawn", port=port),
        )
