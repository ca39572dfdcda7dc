"""LaunchPlan: everything needed to launch one topology, resolved, with no side effects."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.paths import REPO_ROOT
from harness.core.secrets import redact_env, scrub_text
from harness.profiles import Budget, CaseSpec, Profile, RoleSpec, Tier
from harness.profiles.launcher_files import text_with_used_files
from harness.profiles.launcher_ports import launcher_port_vars
from harness.runtime.dynamo_src import CHECKOUT_LAUNCHER, ROLE_ADAPTER, DynamoSource
from harness.runtime.launch_env import launcher_env

EVENT_BROKER_PORTS = ("ZMQ_XSUB_PORT", "ZMQ_XPUB_PORT")
FRONTEND_PORT = "DYN_HTTP_PORT"  # dynamo.frontend reads it itself


@dataclass(frozen=True)
class RolePlan:
    name: str
    kind: str
    port: int | None
    discovery_component: str | None = None
    # Where something else deployed it (target mode); launched roles: 127.0.0.1:<port>.
    health: str | None = None
    metrics: str | None = None

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


def launcher_script(profile: Profile, source: DynamoSource | None, root: Path = REPO_ROOT) -> Path:
    """The launcher a profile runs: upstream's, from the checkout under test, where it holds it
    (--dynamo-src); else ours."""
    if source is not None and profile.upstream_launcher:
        script = source.root / profile.upstream_launcher
        if script.is_file():
            return script
    return root / profile.launcher


def port_names(
    profile: Profile, source: DynamoSource | None = None, root: Path = REPO_ROOT
) -> list[str]:
    """Every port the launcher reads (harness/profiles/launcher_ports.py), each role's health
    port, the frontend's and the event broker's."""
    read = launcher_port_vars(text_with_used_files(launcher_script(profile, source, root)))
    health = [r.health_port for r in profile.worker_roles if r.health_port]
    return list(dict.fromkeys([FRONTEND_PORT, *health, *read, *EVENT_BROKER_PORTS]))


def layout_args(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """What makes one launch of a profile differ from another: the tier's layout flags, then
    the case's (a deployed target states the same, `launcher_args` in its file)."""
    spec = profile.tier(tier)
    assert spec is not None
    return [*spec.launcher_args, *case.launcher_args]


def launcher_args(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """As upstream's tests invoke a launcher: the profile's model first, then layout_args."""
    return ["--model", profile.model.gpu, *layout_args(profile, tier, case)]


def launch_signature(profile: Profile, tier: Tier, case: CaseSpec) -> str:
    """Cases with equal signatures share one launched topology, across profiles too
    (e.g. `epd` and `epd_video` run on the same E/P/D launch)."""
    spec = profile.tier(tier)
    assert spec is not None
    source = DynamoSource.from_env()
    key = {
        "launcher": str(launcher_script(profile, source)),
        "args": launcher_args(profile, tier, case),
        "env": {**profile.env, **spec.env},
        "model": profile.model.gpu if tier == "gpu" else profile.model.cpu,
        "tier": tier,
        "roles": [r.model_dump() for r in profile.roles],
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return f"{Path(profile.launcher).stem}-{tier}-{digest}"


def adapter_env(profile: Profile, model: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the role adapter (harness/runtime/role_adapter.py) reads: the real interpreter, which
    role each health-port variable names, the profile's model and its tiny checkpoint, the
    device leased for each GPU position, and upstream's managed-ports switch (a missing port is
    then an error, not a default)."""
    role_ports = {r.health_port: r.name for r in profile.worker_roles if r.health_port}
    extra = {
        "HARNESS_ADAPTER_PYTHON": sys.executable,  # runs the adapter
        "HARNESS_REAL_PYTHON": sys.executable,  # what the adapter execs each role with
        "HARNESS_ROLE_ADAPTER": str(ROLE_ADAPTER),
        "HARNESS_ROLE_PORTS": json.dumps(role_ports),
        "HARNESS_PROFILE": profile.name,
        "HARNESS_PROFILE_MODEL": profile.model.gpu,
        "HARNESS_CPU_MODEL": model,
        "DYN_MANAGED_PORTS": "1",
    }
    if env.get("HARNESS_DEVICE") != "cpu" and env.get("CUDA_VISIBLE_DEVICES"):
        extra["HARNESS_GPUS"] = env["CUDA_VISIBLE_DEVICES"]  # the lease's, one per position
    return extra


def _role_plan(role: RoleSpec, ports: Mapping[str, int]) -> RolePlan:
    port = ports[role.health_port] if role.health_port else None
    return RolePlan(role.name, role.kind, port, role.discovery_component)


def resolve(
    profile: Profile,
    tier: Tier,
    case: CaseSpec,
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
    spec = profile.tier(tier)
    if spec is None:
        raise ValueError(f"{profile.source}: profile {profile.name} has no {tier} tier")
    source = DynamoSource.from_env(base_env)
    missing = [n for n in port_names(profile, source, root) if n not in ports]
    if missing:
        raise ValueError(f"profile {profile.name}: no port leased for {missing}")
    served = profile.model.gpu
    env = launcher_env(tier=tier, model=model, served_model_name=served, ports=ports,
                       scratch_dir=scratch_dir, log_dir=run_dir / "logs",
                       extra={**profile.env, **spec.env}, marker_env=marker_env,
                       base=base_env)  # fmt: skip
    if source is not None:
        env.update(source.env(run_dir / "logs", env.get("PYTHONPATH")))
    env.update(adapter_env(profile, model, env))
    launcher, args = launcher_script(profile, source, root), launcher_args(profile, tier, case)
    if launcher != root / profile.launcher:  # the checkout's own
        launcher, args = CHECKOUT_LAUNCHER, [str(launcher), *args]
    return LaunchPlan(profile=profile.name, tier=tier, launcher=launcher, args=tuple(args),
                      model=model, served_model_name=served,
                      roles=tuple(_role_plan(r, ports) for r in profile.roles),
                      ports=dict(ports), run_dir=run_dir, scratch_dir=scratch_dir,
                      budget=spec.budget, topology_id=topology_id,
                      signature=launch_signature(profile, tier, case), env=env,
                      dynamo_src=source, loopback_only=profile.not_loopback is None)  # fmt: skip
