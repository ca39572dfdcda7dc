"""GPU-tier launches on a simulated inventory: GPUs leased per case, released on every path."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.machine.gpu_leases import GpuLeaseBroker, GpuUnavailable
from harness.machine.gpus import GpuInventory
from harness.machine.port_registry import PortRegistry
from harness.profiles import load_profiles
from harness.topology.topology import launch

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
        launch(LaunchSpec.of(profile, "gpu", profile.cases[0]), registry=registry)
    assert err.value.cause == Cause.MODEL_NOT_CACHED
    assert "huggingface-cli download Qwen/Qwen3-VL-2B-Instruct" in err.value.message
    assert "HARNESS_DOWNLOAD_MODELS=1" in err.value.message
    assert simulated.leases() == []
    assert registry.leases() == []


def test_case_needing_more_gpus_than_exist_is_refused(simulated: GpuLeaseBroker) -> None:
    profile = PROFILES["vllm/epd_llava-1.5-7b.yaml"]  # 3 GPUs by its memory plan, 2 here
    with pytest.raises(GpuUnavailable) as refused:
        launch(LaunchSpec.of(profile, "gpu", profile.cases[0]))
    assert str(refused.value).endswith(
        "needs 3 GPU(s) (13.9 GiB, 18.5 GiB, 18.5 GiB); 2 visible"
    ), refused.value
    assert simulated.leases() == []


def test_opt_in_download_tries_once_under_a_lock_and_names_why_it_failed(tmp_path: Path) -> None:
    """HARNESS_DOWNLOAD_MODELS=1 against a hub that refuses connections (real huggingface_hub)."""
    script = (
        "from harness.machine.model_files import ensure_cached\n"
        "from harness.core.verdict import TopologyFailure\n"
        "try:\n    ensure_cached('Qwen/Qwen3-VL-2B-Instruct')\n"
        "except TopologyFailure as failure:\n    print(failure.cause, failure.message)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {
        "HARNESS_DOWNLOAD_MODELS": "1",
        "HF_HOME": str(tmp_path),
        "HF_ENDPOINT": "http://127.0.0.1:9",
    }
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.stdout.startswith("model_not_cached Qwen/Qwen3-VL-2B-Instruct is not in the "), (
        run.stdout + run.stderr
    )
    assert "downloading it failed (" in run.stdout and "Connection refused" in run.stdout
    assert "huggingface-cli download Qwen/Qwen3-VL-2B-Instruct" in run.stdout
    assert (tmp_path / "serve-harness-locks" / "Qwen--Qwen3-VL-2B-Instruct.lock").exists()
