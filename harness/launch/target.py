"""A deployed topology's target file (YAML), read and checked against its profile, and the plan
it stands for (`target_plan`); `topology.attach` runs the cases on it. Example:

    profile: epd_qwen3-vl-2b            # whose cases run
    tier: cpu                           # whose expectations judge them (default gpu)
    frontend: http://127.0.0.1:8000
    served_model_name: Qwen/Qwen3-VL-2B-Instruct   # default: the profile's model
    model_dir: /path/to/checkpoint      # CPU tier: the checkpoint behind the answers
    launcher_args: []                   # what the deployment was started with (cases needing
                                        # other launcher args are skipped)
    api_key_env: STAGING_API_KEY        # sent as `Authorization: Bearer …`; scrubbed
    roles:                              # every worker of the profile
      encode: {health: http://10.0.0.5:9090/health, metrics: http://10.0.0.5:9090/metrics}"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import (
    LaunchPlan,
    RolePlan,
)
from harness.profiles import Profile, Tier


class TargetError(ValueError):
    """A target file that cannot be used; the message names the file and field."""


class TargetRole(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    health: str
    metrics: str | None = None


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    profile: str
    tier: Tier = "gpu"
    frontend: str
    served_model_name: str | None = None
    model_dir: str | None = None
    launcher_args: list[str] = []
    api_key_env: str | None = None
    roles: dict[str, TargetRole]


def load_target(path: Path) -> TargetSpec:
    try:
        raw = yaml.safe_load(path.read_text())
        return TargetSpec.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise TargetError(f"{path}: {exc}") from None
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join(map(str, e['loc'])) or '<top>'}: {e['msg']}" for e in exc.errors()
        ]
        raise TargetError("\n".join(lines)) from None


def check_target(spec: TargetSpec, profile: Profile, path: Path) -> None:
    """The target names every worker of its profile, and no other role."""
    workers = {r.name for r in profile.worker_roles}
    missing, extra = sorted(workers - set(spec.roles)), sorted(set(spec.roles) - workers)
    problems = (
        [f"{path}: roles: {profile.name}'s workers {missing} have no URLs"] if missing else []
    )
    problems += [f"{path}: roles: {extra} are not workers of {profile.name}"] if extra else []
    if spec.tier == "cpu" and not spec.model_dir:
        problems.append(f"{path}: model_dir: the CPU tier judges answers against the checkpoint")
    if problems:
        raise TargetError("\n".join(problems))


def target_plan(spec: TargetSpec, launch: LaunchSpec, run_dir: Path) -> LaunchPlan:
    """The plan of a deployed target: its roles' URLs where the target file gives them."""
    roles = tuple(
        RolePlan(
            r.name,
            r.kind,
            None,
            r.discovery_component,
            health=spec.roles[r.name].health,
            metrics=spec.roles[r.name].metrics,
        )
        if r.name in spec.roles
        else RolePlan(r.name, r.kind, None)
        for r in launch.roles
    )
    env = dict(os.environ)
    return LaunchPlan(
        profile=launch.name,
        tier=spec.tier,
        launcher=Path("/dev/null"),
        args=tuple(spec.launcher_args),
        model=spec.model_dir or launch.model.gpu,
        served_model_name=spec.served_model_name or launch.model.gpu,
        roles=roles,
        ports={},
        run_dir=run_dir,
        scratch_dir=run_dir / "scratch",
        budget=launch.budget,
        topology_id=f"target-{launch.name}",
        signature=f"target-{launch.name}",
        env=env,
        frontend=spec.frontend,
    )
