"""The audit's checks on one captured launch: ports, health sources, engine flags, registration."""

from __future__ import annotations

import re
from pathlib import Path

from harness.audit.capture import Capture
from harness.audit.engine_flags import check_flags
from harness.audit.findings import Finding, Invocation
from harness.audit.health_source import ENDPOINT_HEALTH_ENV, lacks_health_source
from harness.profiles import Profile, RoleSpec
from harness.profiles.launcher_files import text_with_used_files
from harness.profiles.launcher_ports import fixed_ports
from harness.runtime.dynamo_src import CHECKOUT_LAUNCHER

BIND_ENV = ("DYN_SYSTEM_PORT", "VLLM_NIXL_SIDE_CHANNEL_PORT")  # ports an engine binds from env
FRONTEND_ENV = "DYN_HTTP_PORT"
PORT_FLAG = re.compile(r"^--[\w-]*port$")
UNSET_PORT = re.compile(r"variable (\w+) is not set")
ENGINES = ("dynamo.vllm", "dynamo.sglang")
STRAY_FIX = ("read it from a variable ($(port VAR DEFAULT), upstream's dyn_port or ${VAR:-N}): "
             "the harness leases every port variable a launcher reads")  # fmt: skip
HEALTH_FIX = f"""set {ENDPOINT_HEALTH_ENV}='["generate"]' on its start_role"""
MODEL_FIX = 'pass --model "$MODEL" (--model-path for SGLang)'


def _ports_in(call: Invocation, values: set[int]) -> set[int]:
    used = {int(call.env[k]) for k in BIND_ENV if call.env.get(k, "").isdigit()}
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
        f"{k}={call.env[k]}" for k in BIND_ENV if k in call.env and not _leased(call.env[k], values)
    ]
    args = call.engine_args
    for i, arg in enumerate(args[:-1]):
        if PORT_FLAG.match(arg) and args[i + 1].isdigit() and int(args[i + 1]) not in values:
            stray.append(f"{arg} {args[i + 1]}")
    return stray


def check_ports(cap: Capture, launcher: str) -> list[Finding]:
    out: list[Finding] = []
    if cap.returncode != 0:
        tail = " | ".join(cap.stderr.strip().splitlines()[-3:])
        unset = UNSET_PORT.search(cap.stderr)
        if unset:
            fix = (f"read {unset.group(1)} where the harness can see it (`port`, `dyn_port` or "
                   "${VAR:-N} in the launcher or a helper it sources)")  # fmt: skip
        elif "needs GPU #" in cap.stderr:
            fix = "place the roles on the GPUs the layout uses (each role's gpu.device)"
        else:
            fix = "make the launcher start every role under managed ports"
        out.append(Finding(launcher, "launcher", f"exited {cap.returncode}: {tail}", fix))
    script = Path(cap.plan.args[0]) if cap.plan.launcher == CHECKOUT_LAUNCHER else cap.plan.launcher
    for fixed in fixed_ports(text_with_used_files(script)):
        out.append(Finding(launcher, "launcher", f"binds port {fixed.port} ({fixed.where}) with "
                           "no variable to move it: it collides with any other run",
                           STRAY_FIX))  # fmt: skip
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
        if not roles and cap.returncode == 0:
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


def check_health(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    out = [
        Finding(profile.source, name, "started, but not declared in the profile",
                "add it to the profile's roles")
        for name in sorted(set(cap.roles) - {r.name for r in profile.roles})
    ]  # fmt: skip
    health_ports = set()
    for role in profile.worker_roles:
        call = cap.roles.get(role.name)
        if call is None:
            out.append(Finding(profile.source, role.name, "worker role declared but never "
                               "started", "start_role it, or fix the role name"))  # fmt: skip
            continue
        health_ports.add(call.env.get("DYN_SYSTEM_PORT"))
        out += worker_health_findings(role, call, cap, launcher)
    if len(health_ports - {None}) != len(profile.worker_roles) and cap.returncode == 0:
        out.append(
            Finding(
                launcher,
                "-",
                f"{len(health_ports - {None})} worker health ports for "
                f"{len(profile.worker_roles)} worker roles in the profile",
                "one DYN_SYSTEM_PORT per worker, from its health_port",
            )
        )
    return out


def worker_health_findings(
    role: RoleSpec, call: Invocation, cap: Capture, launcher: str
) -> list[Finding]:
    """One started worker: its system port is the one the harness polls, and it has a health
    source (the seed defect: dynamo.vllm's encode worker registers no payload)."""
    out = []
    want = str(cap.plan.ports[role.health_port or ""])
    got = call.env.get("DYN_SYSTEM_PORT")
    if got != want:
        what = f"DYN_SYSTEM_PORT={got} but the harness polls {role.health_port}={want}"
        fix = f"set DYN_SYSTEM_PORT=$(port {role.health_port} …) on its start_role"
        out.append(Finding(launcher, role.name, what, fix))
    if lacks_health_source(call):
        out.append(Finding(launcher, role.name, f"{call.module} encode worker registers no "
                           f"health-check payload and {ENDPOINT_HEALTH_ENV} is unset: its "
                           "/health stays 503 forever", HEALTH_FIX))  # fmt: skip
    return out


def check_flags_and_registration(cap: Capture, launcher: str) -> list[Finding]:
    out: list[Finding] = []
    for name, call in cap.roles.items():
        result = check_flags(call)
        if result is not None and result.error:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"{call.module} rejects its args ({result.method}): {result.error}",
                    f"use flags it accepts (python -m {call.module} --help)",
                )
            )
        if call.module not in ENGINES:
            continue
        model = call.flag("--model", "--model-path")
        served = call.flag("--served-model-name") or model
        if model != cap.plan.model:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"loads model {model!r}, the plan has {cap.plan.model!r}",
                    MODEL_FIX,
                )
            )
        if served != cap.plan.served_model_name:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"registers as {served!r}, the profile serves {cap.plan.served_model_name!r}",
                    'pass --served-model-name "$SERVED_MODEL_NAME"',
                )
            )
    return out
