"""Role-plan capture: run a launcher for real, each role stopped at the role adapter.

The launcher gets the same LaunchPlan env as a real launch (HARNESS_MANAGED_PORTS=1, fixed fake
ports, the tier's model) with the adapter dry: every role's `python3 -m dynamo.<x>` writes the
adapter's decisions (NAME.adapter.json: the argv and environment the role would run with) and
exits instead of starting an engine; the audit reads those. Anything else the launcher runs with
`python3` (the event broker) runs /bin/true. SIGTERM is ignored in the launcher's process tree:
when the first role exits, wait_any_exit's trap signals the others, and one still starting must
not die before it has written its record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness.audit.findings import Invocation
from harness.audit.gpu_env import simulated_gpu_env
from harness.core.markers import marker_env
from harness.profiles import CaseSpec, Profile, Tier
from harness.runtime.dynamo_src import DynamoSource
from harness.runtime.plan import LaunchPlan, port_names, resolve
from harness.runtime.role_adapter import DRY_ENV, REAL_PYTHON_ENV

# Never bound (no engine starts); below 32768 since Dynamo reads DYN_SYSTEM_PORT as an i16.
FAKE_PORT_BASE = 21301
LAUNCHER_TIMEOUT_S = 30.0


@dataclass
class Capture:
    plan: LaunchPlan
    roles: dict[str, Invocation] = field(default_factory=dict)
    returncode: int | None = None
    stderr: str = ""


def fake_ports(profile: Profile, root: Path) -> dict[str, int]:
    names = port_names(profile, DynamoSource.from_env(), root)
    return {name: FAKE_PORT_BASE + i for i, name in enumerate(names)}


def audit_model(profile: Profile, tier: Tier) -> str:
    """GPU: the HF id (nothing is downloaded); CPU: where the tiny build would live."""
    if tier == "gpu":
        return profile.model.gpu
    from harness.tiny_models.build import default_cache_dir

    return str(default_cache_dir() / f"{profile.model.cpu}-audit-placeholder")


def plan_for(profile: Profile, tier: Tier, case: CaseSpec, work: Path, root: Path) -> LaunchPlan:
    """GPU tier: with the GPUs and per-role memory a lease on idle cards of the profile's claimed
    size would hand the launcher (nothing is leased)."""
    base_env = {**os.environ, **simulated_gpu_env(profile)} if tier == "gpu" else None
    return resolve(
        profile,
        tier,
        case,
        ports=fake_ports(profile, root),
        run_dir=work / "run",
        scratch_dir=work / "s",
        model=audit_model(profile, tier),
        topology_id="audit",
        marker_env=marker_env("audit", "audit", os.getpid()),
        base_env=base_env,
        root=root,
    )


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run_launcher(plan: LaunchPlan, work: Path) -> Capture:
    env = {**plan.env, DRY_ENV: "1", REAL_PYTHON_ENV: "/bin/true"}
    capture = Capture(plan)
    try:
        proc = subprocess.run(
            plan.argv,
            env=env,
            capture_output=True,
            text=True,
            timeout=LAUNCHER_TIMEOUT_S,
            preexec_fn=_ignore_sigterm,
            start_new_session=True,
        )
        capture.returncode, capture.stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        capture.stderr = f"launcher still running after {LAUNCHER_TIMEOUT_S:g} s: {exc.stderr!r}"
    capture.roles = _roles(plan.log_dir)
    return capture


def _roles(log_dir: Path) -> dict[str, Invocation]:
    """Each role's adapter record: the argv it would exec and the environment it would see."""
    roles: dict[str, Invocation] = {}
    for path in sorted(log_dir.glob("*.adapter.json")):
        record = json.loads(path.read_text())
        roles[record["role"]] = Invocation(record["role"], record["exec"], record["seen_env"])
    return roles
