"""The target file (`--target FILE`): bad input names the file and the field; a target must name
every worker of its profile and no other role; the plan points each role at its URLs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.core.paths import REPO_ROOT
from harness.launch.launch_spec import LaunchSpec
from harness.launch.target import TargetError, check_target, load_target, target_plan
from harness.profiles import load_profile

EPD = load_profile(REPO_ROOT / "profiles" / "vllm" / "epd_qwen3-vl-2b.yaml", REPO_ROOT)
ROLES = {
    name: {
        "health": f"http://127.0.0.1:{port}/health",
        "metrics": f"http://127.0.0.1:{port}/metrics",
    }
    for name, port in (("encode", 9101), ("prefill", 9102), ("decode", 9103))
}


def write(tmp_path: Path, **spec: object) -> Path:
    path = tmp_path / "target.yaml"
    base = {"profile": "epd_qwen3-vl-2b", "frontend": "http://127.0.0.1:8000", "roles": ROLES}
    path.write_text(yaml.safe_dump({**base, **spec}))
    return path


def test_a_full_target_plans_each_role_at_its_urls(tmp_path: Path) -> None:
    path = write(tmp_path)
    spec = load_target(path)
    check_target(spec, EPD, path)
    plan = target_plan(spec, LaunchSpec.of(EPD, spec.tier, EPD.cases[0]), tmp_path / "run")
    assert plan.frontend == "http://127.0.0.1:8000"
    assert {r.name: r.health_url for r in plan.workers} == {
        name: urls["health"] for name, urls in ROLES.items()
    }
    assert plan.served_model_name == "Qwen/Qwen3-VL-2B-Instruct-FP8"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"frontend": None}, r"target.yaml: frontend: Input should be a valid string"),
        ({"tier": "tpu"}, r"target.yaml: tier: Input should be 'cpu' or 'gpu'"),
        ({"colour": "red"}, r"target.yaml: colour: Extra inputs are not permitted"),
        ({"roles": {"encode": {"health": 1}}}, r"target.yaml: roles.encode.health: "),
    ],
)
def test_bad_fields_are_named(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        load_target(write(tmp_path, **change))


def test_missing_and_foreign_roles_are_named(tmp_path: Path) -> None:
    roles = {"encode": ROLES["encode"], "worker": ROLES["decode"]}
    path = write(tmp_path, roles=roles)
    with pytest.raises(TargetError) as error:
        check_target(load_target(path), EPD, path)
    assert "workers ['decode', 'prefill'] have no URLs" in str(error.value)
    assert "['worker'] are not workers of epd_qwen3-vl-2b" in str(error.value)


def test_the_cpu_tier_needs_the_checkpoint(tmp_path: Path) -> None:
    path = write(tmp_path, tier="cpu")
    with pytest.raises(TargetError, match="model_dir: the CPU tier judges answers"):
        check_target(load_target(path), EPD, path)


def test_unreadable_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "target.yaml"
    path.write_text("profile: [unclosed")
    with pytest.raises(TargetError, match=str(path)):
        load_target(path)
