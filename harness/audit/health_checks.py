"""Which worker roles of a captured launch have no health source unless the launcher gives them one.
A Dynamo worker's /health turns 200 through a health-check payload (a canary it registers) or
through `runtime.set_health_status(True)`. An encode worker (`--disaggregation-mode encode`)
registers no payload in either backend; whether it sets its own status is read from the installed
source, so the rule follows the Dynamo version actually installed:
- dynamo.vllm 1.6.1: never calls set_health_status -> needs DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS
  (without it /health stays 503 {"status":"notready","endpoints":{"generate":"ready"}});
- dynamo.sglang 1.6.1: init_multimodal_encode_worker calls set_health_status(True) after registering
  its model -> has a source of its own."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
from pathlib import Path

from harness.audit.capture import Capture, Finding, Invocation
from harness.audit.launch_check import LaunchCheck
from harness.core.role_contract import (
    SYSTEM_PORT_ENV,
)
from harness.profiles import Profile, RoleSpec

ENDPOINT_HEALTH_ENV = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"

SETS_HEALTH = "set_health_status(True)"


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def encode_sets_own_health(module: str) -> bool:
    """True if the installed backend's encode-worker init reports health itself."""
    root = _package_dir(module)
    if root is None:
        return False
    if module == "dynamo.sglang":
        source = (root / "init_multimodal.py").read_text()
        for node in ast.parse(source).body:
            if (
                isinstance(node, ast.AsyncFunctionDef)
                and node.name == "init_multimodal_encode_worker"
            ):
                return SETS_HEALTH in (ast.get_source_segment(source, node) or "")
        return False
    return any(SETS_HEALTH in p.read_text() for p in root.rglob("*.py") if "tests" not in p.parts)


def registers_no_payload(call: Invocation) -> bool:
    return call.flag("--disaggregation-mode") == "encode"


def endpoint_health_names(call: Invocation) -> list[str]:
    raw = call.env.get(ENDPOINT_HEALTH_ENV, "")
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def lacks_health_source(call: Invocation) -> bool:
    if not registers_no_payload(call) or encode_sets_own_health(call.module):
        return False
    return "generate" not in endpoint_health_names(call)


HEALTH_FIX = f"""set {ENDPOINT_HEALTH_ENV}='["generate"]' on its start_role"""


def check_health(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    out = [
        Finding(
            profile.source,
            name,
            "started, but not declared in the profile",
            "add it to the profile's roles",
        )
        for name in sorted(set(cap.roles) - {r.name for r in profile.roles})
    ]
    health_ports = set()
    for role in profile.worker_roles:
        call = cap.roles.get(role.name)
        if call is None:
            out.append(
                Finding(
                    profile.source,
                    role.name,
                    "worker role declared but never started",
                    "start_role it, or fix the role name",
                )
            )
            continue
        health_ports.add(call.env.get(SYSTEM_PORT_ENV))
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
    """One started worker: its system port is the one its profile names (the harness polls the
    port a role was started with; a profile that names another misleads its reader), and it has
    a health source (dynamo.vllm's encode worker registers no payload of its own)."""
    out = []
    want = str(cap.plan.ports[role.health_port or ""])
    got = call.env.get(SYSTEM_PORT_ENV)
    if got != want:
        given = cap.plan.port_name(int(got)) if got and got.isdigit() else "none"
        what = (
            f"started with DYN_SYSTEM_PORT={got} ({given}), the profile names "
            f"{role.health_port}={want} its health port"
        )
        fix = f"name {given} in the profile's health_port, or start it on {role.health_port}"
        out.append(Finding(launcher, role.name, what, fix))
    if lacks_health_source(call):
        out.append(
            Finding(
                launcher,
                role.name,
                f"{call.module} encode worker registers no "
                f"health-check payload and {ENDPOINT_HEALTH_ENV} is unset: its "
                "/health stays 503 forever",
                HEALTH_FIX,
            )
        )
    return out


class HealthSources(LaunchCheck):
    name = "health sources"
    order = 40

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_health(profile, cap, launcher)
