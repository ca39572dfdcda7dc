"""GPU-tier launches on a simulated inventory: GPUs leased per case, released on every path."""

from pathlib import Path

import pytest

from harness.gpus import GpuInventory, GpuLeaseBroker
from harness.launch import launch
from harness.paths import REPO_ROOT
from harness.ports import PortRegistry
from harness.profile import load_profiles
from harness.verdict import Cause, TopologyFailure

PROFILES = {
    p.source.split("profiles/")[-1]: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
}


@pytest.fixture
def simulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GpuLeaseBroker:
    monkeypatch.setenv("HARNESS_GPUS", "2x80")
    monkeypatch.setenv("HARNESS_GPU_REGISTRY", str(tmp_path / "gpus.json"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-cache"))
    return GpuLeaseBroker(GpuInventory.detect(), tmp_path / "gpus.json")


def test_uncached_model_fails_fast_and_gives_gpus_back(
    simulated: GpuLeaseBroker, tmp_path: Path
) -> None:
    profile = PROFILES["vllm/agg_qwen3-vl-2b.yaml"]
    registry = PortRegistry(tmp_path / "ports.json")
    with pytest.raises(TopologyFailure) as err:
        launch(profile, "gpu", profile.cases[0], registry=registry)
    assert err.value.cause == Cause.MODEL_NOT_CACHED
    assert "huggingface-cli download Qwen/Qwen3-VL-2B-Instruct" in err.value.message
    assert simulated.leases() == []
    assert registry.leases() == []


def test_case_needing_more_gpus_than_exist_is_refused(simulated: GpuLeaseBroker) -> None:
    profile = PROFILES["vllm/epd_llava-1.5-7b.yaml"]  # gpu_4 on a 2-GPU inventory
    with pytest.raises(Exception, match=r"4|GPU"):
        launch(profile, "gpu", profile.cases[0])
    assert simulated.leases() == []
