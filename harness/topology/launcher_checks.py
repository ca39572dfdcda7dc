"""What a launch must be before anything of it starts, on this machine: its launcher a bash
script that exists (a checkout's, in the checkout), and no port it fixes as a number held by
anything else (such a port can be neither leased nor moved: its holder is named)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER
from harness.launch.plan import LaunchPlan
from harness.profiles.launchers import fixed_ports, text_with_used_files
from harness.topology.processes import foreign_listeners


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
        script = Path(plan.args[0])
        if not script.is_file():
            raise TopologyFailure(
                Cause.LAUNCHER_INVALID,
                f"no launcher {script} in the Dynamo checkout {plan.dynamo_src.root}",
            )
    check_fixed_ports(plan)


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
