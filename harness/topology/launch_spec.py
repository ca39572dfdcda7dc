"""One launch as a case asks for it (`LaunchSpec`), read from the profile once: what the launcher
runs with and which roles it starts. Everything below it (the port contract, the GPU lease, the
plan, the start) reads this value, never the profile's cases, requests or expectations.

- `LaunchSpec.of(profile, tier, case)`: the value; its `signature` says which cases share one
  launched topology.
- `layout_args`, `launcher_args`: how a profile's launcher is invoked for a case."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.paths import REPO_ROOT
from harness.profiles import Budget, CaseSpec, GpuTierSpec, ModelSpec, Profile, RoleSpec, Tier
from harness.topology.dynamo_src import DynamoSource


@dataclass(frozen=True)
class LaunchSpec:
    name: str  # the profile's (runs, lease tags, HARNESS_PROFILE)
    stack: str
    tier: Tier
    model: ModelSpec
    launcher: Path  # ours
    upstream_launcher: str | None  # upstream's, relative to a Dynamo checkout (--dynamo-src)
    args: tuple[str, ...]  # launcher_args
    env: Mapping[str, str]  # the profile's, then its tier's
    roles: tuple[RoleSpec, ...]
    budget: Budget  # the tier's
    gpu: GpuTierSpec  # the profile's GPU tier (the memory plan reads it)
    loopback_only: bool  # False where the profile says why a role listens on every interface
    wide_ports: tuple[str, ...]  # what the profile lets listen beyond loopback (its wide_ports)
    signature: str

    @classmethod
    def of(cls, profile: Profile, tier: Tier, case: CaseSpec, root: Path = REPO_ROOT) -> LaunchSpec:
        spec = profile.tier(tier)
        if spec is None:
            raise ValueError(f"{profile.source}: profile {profile.name} has no {tier} tier")
        launcher = root / profile.launcher
        args = tuple(launcher_args(profile, tier, case))
        env = {**profile.env, **spec.env}
        roles = tuple(profile.roles)
        script = launcher_script(launcher, profile.upstream_launcher, DynamoSource.from_env())
        key = {
            "launcher": str(script),
            "args": list(args),
            "env": env,
            "model": profile.model.gpu if tier == "gpu" else profile.model.cpu,
            "tier": tier,
            "roles": [r.model_dump() for r in roles],
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        return cls(
            name=profile.name,
            stack=profile.stack,
            tier=tier,
            model=profile.model,
            launcher=launcher,
            upstream_launcher=profile.upstream_launcher,
            args=args,
            env=env,
            roles=roles,
            budget=spec.budget,
            gpu=profile.gpu,
            loopback_only=profile.not_loopback is None,
            wide_ports=tuple(profile.wide_ports),
            signature=f"{Path(profile.launcher).stem}-{tier}-{digest}",
        )

    @property
    def worker_roles(self) -> tuple[RoleSpec, ...]:
        return tuple(r for r in self.roles if r.kind == "worker")

    def script(self, source: DynamoSource | None) -> Path:
        """The launcher this launch runs (launcher_script)."""
        return launcher_script(self.launcher, self.upstream_launcher, source)


def launcher_script(ours: Path, upstream: str | None, source: DynamoSource | None) -> Path:
    """Upstream's launcher, from the checkout under test, where it holds it (--dynamo-src); else
    ours."""
    if source is not None and upstream:
        script = source.root / upstream
        if script.is_file():
            return script
    return ours


def layout_args(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """What makes one launch of a profile differ from another: the tier's layout flags, then
    the case's (a deployed target states the same, `launcher_args` in its file)."""
    spec = profile.tier(tier)
    assert spec is not None
    return [*spec.launcher_args, *case.launcher_args]


def launcher_args(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """As upstream's tests invoke a launcher: the profile's model first, then layout_args."""
    return ["--model", profile.model.gpu, *layout_args(profile, tier, case)]
