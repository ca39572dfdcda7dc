"""A captured launch's ports: every port a role binds is one the harness leased (a port written as a
number, or one a role binds that no variable moves, is a finding), and what listens beyond loopback
is what the profile allows (`wide_ports`)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.audit.capture import Capture, Finding, Invocation
from harness.audit.launch_check import LaunchCheck
from harness.core.role_contract import (
    FRONTEND_PORT_ENV,
    NIXL_PORT_ENV,
    SYSTEM_PORT_ENV,
)
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER
from harness.launch.port_contract import offered_to_all
from harness.profiles import Profile
from harness.profiles.launchers import fixed_ports, text_with_used_files

BIND_ENV = (SYSTEM_PORT_ENV, NIXL_PORT_ENV)  # ports an engine binds from env

FRONTEND_ENV = FRONTEND_PORT_ENV

PORT_FLAG = re.compile(r"^--[\w-]*port$")

UNSET_PORT = re.compile(r"variable (\w+) is not set")

ENGINES = ("dynamo.vllm", "dynamo.sglang")

STRAY_FIX = (
    "read it from a variable ($(port VAR DEFAULT), upstream's dyn_port or ${VAR:-N}): "
    "the harness leases every port variable a launcher reads"
)


def _bind_env(call: Invocation) -> tuple[str, ...]:
    """The env ports this role binds: an engine worker's (the frontend drops DYN_SYSTEM_PORT,
    dynamo/frontend/main.py; a helper script binds only what its argv names)."""
    return BIND_ENV if call.module in ENGINES else ()


def _ports_in(call: Invocation, values: set[int]) -> set[int]:
    used = {int(call.env[k]) for k in _bind_env(call) if call.env.get(k, "").isdigit()}
    if "dynamo.frontend" in call.argv and call.env.get(FRONTEND_ENV, "").isdigit():
        used.add(int(call.env[FRONTEND_ENV]))  # dynamo.frontend reads it itself
    for token in call.argv:
        used |= {v for v in values if re.search(rf"(?<!\d){v}(?!\d)", token)}
    return used


def _leased(value: str, values: set[int]) -> bool:
    return value.isdigit() and int(value) in values


def _stray_ports(call: Invocation, values: set[int]) -> list[str]:
    """Port-valued flags and bind env vars whose value the harness did not lease."""
    stray = [
        f"{k}={call.env[k]}"
        for k in _bind_env(call)
        if k in call.env and not _leased(call.env[k], values)
    ]
    args = call.engine_args
    for i, arg in enumerate(args[:-1]):
        if PORT_FLAG.match(arg) and args[i + 1].isdigit() and int(args[i + 1]) not in values:
            stray.append(f"{arg} {args[i + 1]}")
    return stray


def check_wide_ports(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """Each `wide_ports` entry names a port variable the launcher reads or a role: any other
    exempts nothing, and the listener it meant is held to loopback."""
    roles = {r.name for r in profile.roles}
    return [
        Finding(
            launcher,
            "profile",
            f"wide_ports names {key}, which is neither a port variable the launcher reads nor a "
            "role of the profile",
            "name the launcher's port variable (or the role) whose listener must be wide",
        )
        for key in profile.wide_ports
        if key not in cap.plan.ports and key not in roles
    ]


def check_ports(cap: Capture, launcher: str) -> list[Finding]:
    out = [
        Finding(launcher, role, f"the role adapter refuses it: {why}", STRAY_FIX)
        for role, why in cap.refused.items()
    ]
    if cap.returncode != 0 and not cap.refused:
        tail = " | ".join(cap.stderr.strip().splitlines()[-3:])
        unset = UNSET_PORT.search(cap.stderr)
        if unset:
            fix = (
                f"read {unset.group(1)} where the harness can see it (`port`, `dyn_port` or "
                "${VAR:-N} in the launcher or a helper it sources)"
            )
        elif "needs GPU #" in cap.stderr:
            fix = "place the roles on the GPUs the layout uses (each role's gpu.device)"
        else:
            fix = "make the launcher start every role under managed ports"
        out.append(Finding(launcher, "launcher", f"exited {cap.returncode}: {tail}", fix))
    script = Path(cap.plan.args[0]) if cap.plan.launcher == CHECKOUT_LAUNCHER else cap.plan.launcher
    for fixed in fixed_ports(text_with_used_files(script)):
        out.append(
            Finding(
                launcher,
                "launcher",
                f"binds port {fixed.port} ({fixed.where}) with "
                "no variable to move it: it collides with any other run",
                STRAY_FIX,
            )
        )
    values = set(cap.plan.ports.values())
    users: dict[int, list[str]] = {}
    for name, call in cap.roles.items():
        for port in _ports_in(call, values):
            users.setdefault(port, []).append(name)
        for stray in _stray_ports(call, values):
            out.append(
                Finding(
                    launcher, name, f"uses port {stray}, which the harness did not lease", STRAY_FIX
                )
            )
    for var, port in cap.plan.ports.items():
        roles = users.get(port, [])
        if not roles and cap.returncode == 0 and not offered_to_all(var):
            out.append(
                Finding(
                    launcher,
                    "-",
                    f"leased port {var} is consumed by no role",
                    f"pass ${var} to the role that opens it, or drop it",
                )
            )
        elif len(roles) > 1:
            out.append(
                Finding(
                    launcher,
                    ",".join(sorted(roles)),
                    f"roles share port {var}",
                    "give each role its own leased port variable",
                )
            )
    return out


class PortsLeased(LaunchCheck):
    name = "leased ports"
    order = 10

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_ports(cap, launcher)


class WidePorts(LaunchCheck):
    name = "listeners beyond loopback"
    order = 30

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_wide_ports(profile, cap, launcher)
