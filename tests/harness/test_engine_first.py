"""The engine alone before the launch (harness/cases/engine_first.py) on the GPU tier, without a
GPU: the launcher's dry run on cards planned as the audit plans them (idle cards of the profile's
claimed size) gives every GPU profile's answering role's launch, with the card it will run on and
its memory share, which the engine alone is started with."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.audit.capture import plan_for
from harness.cases.case import ServeCase
from harness.cases.engine_first import answering_roles, dry_launch
from harness.core.paths import REPO_ROOT
from harness.core.role_contract import REAL_PYTHON_ENV
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.engine_alone import EngineLaunch
from harness.profiles import Profile, load_profiles

GPU_PROFILES = [
    p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT) if p.tier("gpu") and not p.gpu_skip
]
# the engine flag a role's memory share travels in, by stack (harness/machine/memory_plan.py)
SHARE = {"dynamo-vllm": "--gpu-memory-utilization", "dynamo-sglang": "--mem-fraction-static"}


@pytest.mark.parametrize("profile", GPU_PROFILES, ids=lambda p: p.name)
def test_the_dry_run_gives_the_answering_roles_launch_on_its_card(
    profile: Profile, tmp_path: Path
) -> None:
    case = profile.cases[0]
    plan = plan_for(profile, "gpu", case, tmp_path, REPO_ROOT)
    roles = answering_roles(ServeCase(profile, case, "gpu"))
    spec = LaunchSpec.of(profile, "gpu", case)
    launch = dry_launch(spec, plan, profile.stack, roles, tmp_path / "dry")
    assert isinstance(launch, EngineLaunch), launch
    assert launch.role == roles[-1]
    assert launch.python == plan.env[REAL_PYTHON_ENV], "the dry run's stand-in interpreter"
    assert launch.model == plan.model
    flags = {unit[0] for unit in (*launch.args, *launch.placement)}
    assert SHARE[profile.stack] in flags, f"{profile.name}: no memory share in {flags}"
    if profile.accelerator == "cuda":
        assert dict(launch.placement_env).get("CUDA_VISIBLE_DEVICES"), launch.placement_env
