"""One topology's launch, resolved before anything starts: its environment, its plan, its checks.

- `launcher_env` (and `adapter_env`): the environment a launcher runs under: tier settings,
  ports, per-topology dirs, markers, and what the role adapter reads.
- `resolve` -> `LaunchPlan`: everything needed to start one launch (launch_spec.py) on this
  machine's ports and dirs, resolved, with no side effects.
- `check_launcher`: refuse a launcher that cannot run, before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.paths import REPO_ROOT, cache_dir, sglang_python
from harness.core.precision import family_dtype
from harness.core.role_contract import (
    ADAPTER_ENV,
    ADAPTER_PYTHON_ENV,
    CPU_DTYPE_ENV,
    CPU_MODEL_ENV,
    DEVICE_ENV,
    ENCODER_TAP_ENV,
    LEASED_GPUS_ENV,
    LEASED_PORTS_ENV,
    LOG_DIR_ENV,
    PROFILE_ENV,
    PROFILE_MODEL_ENV,
    REAL_PYTHON_ENV,
    ROLE_PORTS_ENV,
    SGLANG_PYTHON_ENV,
    STACK_ENV,
    STOPPING_ENV,
    STOPPING_FILE,
)
from harness.core.secrets import redact_env, scrub_text
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER, ROLE_ADAPTER, ROLE_SITE, DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.launch.port_contract import FRONTEND_PORT
from harness.profiles import Budget, RoleSpec, Tier


def cache_env(tier: Tier) -> dict[str, str]:
    """Compile and model-info caches survive between topologies (an empty one costs ~13 s:
    docs/measurements.md, "Figures behind constants in the code")."""
    if tier == "gpu":
        return {}
    cache = cache_dir()
    return {
        "HOME": str(cache / "home"),  # Dynamo's model-card cache goes to $HOME/.cache/dynamo
        "HF_HOME": str(cache / "hf"),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
    }


GC_THRESHOLD_ENV = "HARNESS_GC_THRESHOLD"
# Python's cyclic GC during a role's start-up: `import dynamo.vllm.main` runs 9 full (gen 2)
# collections, 2.6 of its 10.8 CPU-s, and the engine core vLLM spawns imports it all again. With a
# third threshold of 1000 (CPython's default is 10) the same import runs none: 0.5 s of GC, 8.0
# CPU-s. The objects made at import live for the whole run, so those collections free almost
# nothing; vLLM freezes its heap itself once the engine is up (vllm/v1/engine/core.py,
# freeze_gc_heap). The figures, how they are counted and the side-by-side run:
# design-deviations.md at 7310361, "Start-up (issue 22)"; docs/measurements.md, "Start-up".
# The hook that reads it is the venv's serve_harness_gc.pth (scripts/apply_shims.py). Empty: the
# interpreter's own thresholds.
GC_THRESHOLD_CPU = "700,10,1000"


def gc_env(tier: Tier, environ: Mapping[str, str]) -> dict[str, str]:
    """CPU tier: the GC thresholds the roles start with (HARNESS_GC_THRESHOLD, or the default)."""
    if tier != "cpu":
        return {}
    value = environ.get(GC_THRESHOLD_ENV, GC_THRESHOLD_CPU)
    parts = value.split(",")
    if value and (len(parts) != 3 or not all(p.strip().isdigit() for p in parts)):
        raise ValueError(
            f"{GC_THRESHOLD_ENV}={value!r}: expected three non-negative integers "
            "(gc.set_threshold's gen0,gen1,gen2, e.g. 700,10,1000) or empty for Python's own"
        )
    return {GC_THRESHOLD_ENV: value}


SCRATCH_SUBDIRS = ("discovery", "tmp", "rpc")


def scratch_env(scratch_dir: Path) -> dict[str, str]:
    """Per-topology scratch: discovery, temp files and RPC sockets never outlive the topology.

    Kept apart from the run dir (logs) and short: vLLM's IPC socket paths must fit in 107 bytes.
    """
    return {
        "DYN_FILE_KV": str(scratch_dir / "discovery"),
        "TMPDIR": str(scratch_dir / "tmp"),
        "VLLM_RPC_BASE_PATH": str(scratch_dir / "rpc"),
        STOPPING_ENV: str(scratch_dir / STOPPING_FILE),
    }


def launcher_env(
    *,
    tier: Tier,
    model: str,
    served_model_name: str,
    ports: Mapping[str, int | str],
    scratch_dir: Path,
    log_dir: Path,
    extra: Mapping[str, str],
    marker_env: Mapping[str, str],
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(cache_env(tier))
    env.update(gc_env(tier, env))
    env.update(scratch_env(scratch_dir))
    env.update(extra)
    env.update({k: str(v) for k, v in ports.items()})
    env.update(
        {
            DEVICE_ENV: tier,
            "HARNESS_MANAGED_PORTS": "1",
            LOG_DIR_ENV: str(log_dir),
            "MODEL": model,
            "SERVED_MODEL_NAME": served_model_name,
            "PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    env.update(marker_env)
    return env


def remove_scratch_of(environ: Mapping[str, str]) -> None:
    """Remove the scratch dir a swept process used (found from its DYN_FILE_KV), if it is ours."""
    kv = environ.get("DYN_FILE_KV")
    if not kv:
        return
    scratch = Path(kv).parent
    if scratch.name.startswith("harness-") and Path(kv).name == "discovery":
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class RolePlan:
    name: str
    kind: str
    port: int | None
    discovery_component: str | None = None
    # Where something else deployed it (target mode); launched roles: 127.0.0.1:<port>.
    health: str | None = None
    metrics: str | None = None
    # The system port the profile planned for it, where `port` is what it was really started
    # with (Topology.learn_port): a launcher that crossed two roles' ports shows in the two.
    planned: int | None = None

    @property
    def planned_port(self) -> int | None:
        return self.planned if self.planned is not None else self.port

    @property
    def health_url(self) -> str | None:
        if self.health:
            return self.health
        return f"http://127.0.0.1:{self.port}/health" if self.port else None

    @property
    def metrics_url(self) -> str | None:
        if self.health:
            return self.metrics
        return f"http://127.0.0.1:{self.port}/metrics" if self.port else None


@dataclass(frozen=True)
class LaunchPlan:
    profile: str
    tier: Tier
    launcher: Path
    args: tuple[str, ...]
    model: str
    served_model_name: str
    roles: tuple[RolePlan, ...]
    ports: Mapping[str, int]
    run_dir: Path
    scratch_dir: Path
    budget: Budget
    topology_id: str
    signature: str
    env: Mapping[str, str] = field(repr=False)
    frontend: str | None = None  # target mode: the deployed frontend's URL
    dynamo_src: DynamoSource | None = None  # the checkout whose Python the roles run
    # False where the profile says why a role must listen on every interface (not_loopback).
    loopback_only: bool = True
    # What the profile lets listen beyond loopback (its `wide_ports`): leased ports by number,
    # and roles allowed one OS-assigned listener each.
    wide_ports: frozenset[int] = frozenset()
    wide_roles: frozenset[str] = frozenset()

    @property
    def argv(self) -> list[str]:
        return ["bash", str(self.launcher), *self.args]

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def frontend_url(self) -> str:
        if self.frontend:
            return self.frontend.rstrip("/")
        return f"http://127.0.0.1:{self.ports[FRONTEND_PORT]}"

    @property
    def discovery_dir(self) -> Path | None:
        """Dynamo's file discovery of a launched topology; None for a deployed target (whose
        discovery the harness cannot read)."""
        return None if self.frontend else self.scratch_dir / "discovery"

    @property
    def workers(self) -> tuple[RolePlan, ...]:
        return tuple(r for r in self.roles if r.kind == "worker")

    def role(self, name: str) -> RolePlan:
        for r in self.roles:
            if r.name == name:
                return r
        raise KeyError(f"no role {name!r} in {self.profile}: {[r.name for r in self.roles]}")

    def port_name(self, port: int | None) -> str:
        """The variable a leased port was handed out as, e.g. 'DYN_SYSTEM_PORT2'."""
        return next((name for name, value in self.ports.items() if value == port), "unleased")

    def describe(self) -> dict[str, object]:
        """Plan as plain data with secrets redacted (for reports, `up`, the audit)."""
        return {
            "profile": self.profile,
            "tier": self.tier,
            "argv": [scrub_text(arg, self.env) for arg in self.argv],
            "model": self.model,
            "ports": dict(self.ports),
            "roles": {r.name: r.health_url for r in self.roles},
            "run_dir": str(self.run_dir),
            "scratch_dir": str(self.scratch_dir),
            "env": redact_env({k: v for k, v in self.env.items() if k in self.own_env_keys}),
        }

    @property
    def own_env_keys(self) -> set[str]:
        return {
            k for k in self.env if k.startswith(("HARNESS_", "DYN_", "VLLM_", "MODEL", "SERVED"))
        }


def encoder_tap_dir(log_dir: Path) -> Path:
    return log_dir / "encoder"


def encoder_tap_env(log_dir: Path, pythonpath: str | None) -> dict[str, str]:
    """CPU tier: the role site's encoder tap (role_site/sitecustomize.py) on every role's path."""
    path = pythonpath.split(os.pathsep) if pythonpath else []
    if str(ROLE_SITE) not in path:
        path.insert(0, str(ROLE_SITE))
    return {"PYTHONPATH": os.pathsep.join(path), ENCODER_TAP_ENV: str(encoder_tap_dir(log_dir))}


def adapter_env(
    launch: LaunchSpec, model: str, env: Mapping[str, str], ports: Mapping[str, int]
) -> dict[str, str]:
    """What the role adapter (harness/launch/role_adapter.py) reads: the real interpreter, which
    role each health-port variable names, every leased port (a role handed another is refused),
    the profile's model, its tiny checkpoint and its family's dtype (core/precision.py), and the
    device leased for each GPU position."""
    role_ports = {r.health_port: r.name for r in launch.worker_roles if r.health_port}
    user = launch.source.python if launch.source else None  # --dynamo-python
    extra = {
        ADAPTER_PYTHON_ENV: sys.executable,  # runs the adapter
        REAL_PYTHON_ENV: str(user or sys.executable),  # what the adapter execs each role with
        ADAPTER_ENV: str(ROLE_ADAPTER),
        ROLE_PORTS_ENV: json.dumps(role_ports),
        LEASED_PORTS_ENV: json.dumps({str(port): name for name, port in ports.items()}),
        PROFILE_ENV: launch.name,
        STACK_ENV: launch.stack,
        PROFILE_MODEL_ENV: launch.model.gpu,
        CPU_MODEL_ENV: model,
    }
    if env.get(DEVICE_ENV) == "cpu":
        extra[SGLANG_PYTHON_ENV] = str(sglang_python())
        extra[CPU_DTYPE_ENV] = family_dtype(launch.model.cpu)
    if env.get(DEVICE_ENV) != "cpu" and env.get("CUDA_VISIBLE_DEVICES"):
        extra[LEASED_GPUS_ENV] = env["CUDA_VISIBLE_DEVICES"]  # the lease's, one per position
    return extra


def xpu_devices_on_cpu(count: int) -> dict[str, str]:
    """The Level Zero devices an XPU launcher is handed on the CPU tier: as many as the profile's
    layout has ("0,1" for two), since upstream's XPU router launcher refuses fewer than it needs
    ("ERROR: ZE_AFFINITY_MASK must have at least 2 comma-separated values (got 0)") before it
    starts a role. Each role's share of it means nothing on the CPU: the role adapter drops it
    (role_adapter.py XPU_ENV_ON_CPU)."""
    return {"ZE_AFFINITY_MASK": ",".join(str(i) for i in range(max(count, 1)))}


def _role_plan(role: RoleSpec, ports: Mapping[str, int]) -> RolePlan:
    port = ports[role.health_port] if role.health_port else None
    return RolePlan(role.name, role.kind, port, role.discovery_component)


def resolve(
    launch: LaunchSpec,
    *,
    ports: Mapping[str, int],
    run_dir: Path,
    scratch_dir: Path,
    model: str,
    topology_id: str,
    marker_env: Mapping[str, str],
    base_env: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
) -> LaunchPlan:
    source = launch.source
    contract = launch.port_contract
    missing = [n for n in contract.names if n not in ports]
    if missing:
        raise ValueError(f"profile {launch.name}: no port leased for {missing}")
    served = launch.model.gpu
    env = launcher_env(
        tier=launch.tier,
        model=model,
        served_model_name=served,
        ports=contract.env(ports),
        scratch_dir=scratch_dir,
        log_dir=run_dir / "logs",
        extra=launch.env,
        marker_env=marker_env,
        base=base_env,
    )
    if source is not None:
        env.update(source.env(run_dir / "logs", env.get("PYTHONPATH")))
    if launch.tier == "cpu":
        env.update(encoder_tap_env(run_dir / "logs", env.get("PYTHONPATH")))
        if launch.accelerator == "xpu":  # what an XPU launcher checks before it starts a role
            env.update(xpu_devices_on_cpu(launch.gpu.gpus))
    env.update(adapter_env(launch, model, env, ports))
    launcher, args = launch.script, list(launch.args)
    # The checkout's own, run under our contract. Ours (a tree's copy of ours included) runs as
    # is: it starts its own event broker and names its roles itself.
    if launch.choice.origin == "checkout" and launcher != launch.launcher:
        launcher, args = CHECKOUT_LAUNCHER, [str(launcher), *args]
    role_names = {r.name for r in launch.roles}  # wide_ports naming neither: the audit says so
    return LaunchPlan(
        profile=launch.name,
        tier=launch.tier,
        launcher=launcher,
        args=tuple(args),
        model=model,
        served_model_name=served,
        roles=tuple(_role_plan(r, ports) for r in launch.roles),
        ports=dict(ports),
        run_dir=run_dir,
        scratch_dir=scratch_dir,
        budget=launch.budget,
        topology_id=topology_id,
        signature=launch.signature,
        env=env,
        dynamo_src=source,
        loopback_only=launch.loopback_only,
        wide_ports=frozenset(ports[key] for key in launch.wide_ports if key in ports),
        wide_roles=frozenset(key for key in launch.wide_ports if key in role_names),
    )
