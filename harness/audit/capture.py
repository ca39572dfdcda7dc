"""The audit's capture of a launch: a launcher run for real, each role stopped at the role adapter.

- `run_launcher`: the launcher gets the same LaunchPlan env as a real launch
  (HARNESS_MANAGED_PORTS=1, fixed fake ports, the tier's model) with the adapter dry: every
  role's `python3 -m dynamo.<x>` writes the adapter's decisions (NAME.adapter.json: the argv and
  environment the role would run with) and exits instead of starting an engine; the audit reads
  those. Anything else the launcher runs with `python3` (the event broker) runs /bin/true.
  SIGTERM is ignored in the launcher's process tree: when the first role exits, wait_any_exit's
  trap signals the others, and one still starting must not die before it has written its record.
- `simulated_gpu_env`: the GPU lease the audit pretends to hold: idle cards of the profile's
  claimed size (nothing is leased, no GPU is touched).
- `Invocation`: one role's recorded call; `Finding`: what the audit reports, one per problem
  (file, role, what, fix)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.paths import marker_env
from harness.core.role_contract import DRY_ENV, REAL_PYTHON_ENV
from harness.launch.dynamo_src import DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import LaunchPlan, resolve
from harness.machine.memory_plan import launcher_memory_env, plan_memory
from harness.profiles import CaseSpec, Profile, Tier


@dataclass(frozen=True)
class Finding:
    file: str
    role: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.file}: [{self.role}] {self.what} -> fix: {self.fix}"


@dataclass(frozen=True)
class Invocation:
    """One role's engine command as the launcher ran it (argv after $PYTHON, its env subset)."""

    role: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    pid: int = 0

    @property
    def module(self) -> str:
        """`dynamo.vllm` for `-m dynamo.vllm …`, else the script path."""
        if len(self.argv) >= 2 and self.argv[0] == "-m":
            return self.argv[1]
        return self.argv[0] if self.argv else ""

    @property
    def engine_args(self) -> list[str]:
        return self.argv[2:] if self.argv[:1] == ["-m"] else self.argv[1:]

    def flag(self, *names: str) -> str | None:
        """Last value of `--name V` / `--name=V` for any of the names (argparse: last wins)."""
        value = None
        args = self.engine_args
        for i, arg in enumerate(args):
            for name in names:
                if arg == name and i + 1 < len(args):
                    value = args[i + 1]
                elif arg.startswith(f"{name}="):
                    value = arg.split("=", 1)[1]
        return value


# Device indices the audit pretends to lease (no GPU is touched): position p -> FIRST_FAKE_GPU + p.
FIRST_FAKE_GPU = 10


def simulated_gpu_env(profile: Profile) -> dict[str, str]:
    """What a GPU lease on idle cards of the claimed size would hand the launcher."""
    plan = plan_memory(profile)
    # as many cards as the runner class has, so a launcher that puts a role past the plan's
    # GPUs is named by the placement check rather than stopped by gpu_for
    positions = max(plan.devices, profile.gpu.gpus)
    totals = [plan.card_bytes] * positions
    env = launcher_memory_env(plan, totals, totals)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(FIRST_FAKE_GPU + p) for p in range(positions))
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


# Never bound (no engine starts); below 32768 since Dynamo reads DYN_SYSTEM_PORT as an i16.
FAKE_PORT_BASE = 21301
LAUNCHER_TIMEOUT_S = 30.0


@dataclass
class Capture:
    plan: LaunchPlan
    roles: dict[str, Invocation] = field(default_factory=dict)
    returncode: int | None = None
    stderr: str = ""
    refused: dict[str, str] = field(default_factory=dict)  # role -> why the adapter refused it


def fake_ports(launch: LaunchSpec, root: Path) -> dict[str, int]:
    names = launch.port_contract.names
    return {name: FAKE_PORT_BASE + i for i, name in enumerate(names)}


def audit_model(profile: Profile, tier: Tier) -> str:
    """GPU: the HF id (nothing is downloaded); CPU: where the tiny build would live."""
    if tier == "gpu":
        return profile.model.gpu
    from harness.tiny_models import default_cache_dir

    return str(default_cache_dir() / f"{profile.model.cpu}-audit-placeholder")


def plan_for(
    profile: Profile,
    tier: Tier,
    case: CaseSpec,
    work: Path,
    root: Path,
    source: DynamoSource | None = None,
) -> LaunchPlan:
    """GPU tier: with the GPUs and per-role memory a lease on idle cards of the profile's claimed
    size would hand the launcher (nothing is leased)."""
    base_env = {**os.environ, **simulated_gpu_env(profile)} if tier == "gpu" else None
    launch = LaunchSpec.of(profile, tier, case, root, source)
    return resolve(
        launch,
        ports=fake_ports(launch, root),
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


# What a dry run's `python3` that is no role runs (the event broker), and so what a role's record
# names as its interpreter where the adapter had no other (the real one is the plan's).
DRY_PYTHON = "/bin/true"


def run_launcher(plan: LaunchPlan, work: Path) -> Capture:
    env = {**plan.env, DRY_ENV: "1", REAL_PYTHON_ENV: DRY_PYTHON}
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
    for path in sorted(plan.log_dir.glob("*.refused")):
        record = json.loads(path.read_text())
        capture.refused[record["role"]] = record["refused"]
    return capture


def _roles(log_dir: Path) -> dict[str, Invocation]:
    """Each role's adapter record: the argv it would exec and the environment it would see."""
    roles: dict[str, Invocation] = {}
    for path in sorted(log_dir.glob("*.adapter.json")):
        record = json.loads(path.read_text())
        roles[record["role"]] = Invocation(record["role"], record["exec"], record["seen_env"])
    return roles
