"""`serve-harness list --upstream --dynamo-src PATH`: upstream's multimodal ids read from a
checkout's whole matrix (harness/profiles/checkout_matrix.py: the multimodal profile files of
vLLM, XPU and SGLang, and the multimodal configs of test_sglang.py and test_trtllm.py), joined
with the catalogue for what a file cannot say, and the ids nothing here carries nor explains
reported as findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.profiles.checkout_matrix import read_matrix
from harness.profiles.upstream import upstream_tests
from harness.profiles.upstream_checkout import UnreadableCheckout, read_checkout
from tests.harness.upstream_profile_files import MATRIX, write_matrix

VLLM_FILE = "tests/serve/multimodal_profiles/vllm.py"


def checkout(root: Path, vllm: str | None = None, only_vllm: bool = False) -> Path:
    files = {VLLM_FILE: MATRIX[VLLM_FILE]} if only_vllm else dict(MATRIX)
    if vllm is not None:
        files[VLLM_FILE] = vllm
    return write_matrix(root, files)


def test_each_id_upstreams_generator_makes_with_its_literal_facts(tmp_path: Path) -> None:
    tests, where = read_checkout(checkout(tmp_path), upstream_tests())
    by_id = {(t.stack, t.id): t for t in tests if t.accelerator == "cuda"}
    assert sorted(i for s, i in by_id if s == "dynamo-vllm") == [
        "mm_agg_newfam-1b",
        "mm_agg_qwen3-vl-2b",
        "mm_agg_qwen3-vl-2b_b64",
        "mm_agg_router_llava-1.5-7b",
        "mm_agg_router_qwen3-vl-2b",
        "mm_agg_video_nvdec_qwen3-vl-2b_h264",
        "mm_agg_video_qwen3-vl-2b",
        "mm_epd_llava-1.5-7b",
        "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding",
    ]
    router = by_id["dynamo-vllm", "mm_agg_router_qwen3-vl-2b"]
    assert (router.cadence, router.gpus, router.min_avg_kv_hit_rate) == ("post_merge", 1, 0.9)
    assert router.model == "Qwen/Qwen3-VL-2B-Instruct-FP8"  # a module-level name, resolved
    assert by_id["dynamo-vllm", "mm_agg_video_qwen3-vl-2b"].cadence == "pre_merge"
    assert by_id["dynamo-vllm", "mm_epd_llava-1.5-7b"].gpus == 4
    assert by_id["dynamo-vllm", "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding"].followups == 1
    flake = by_id["dynamo-vllm", "mm_agg_router_llava-1.5-7b"]
    assert flake.absent == "skipped upstream (LLaVA flake)" and flake.gpus == 2
    # what the file cannot say comes from the catalogue entry of the same id and stack
    sglang = by_id["dynamo-sglang", "mm_agg_router_qwen3-vl-2b"]
    assert sglang.here == "mm_sglang_agg_router_qwen3-vl-2b"
    assert by_id["dynamo-vllm", "mm_agg_newfam-1b"].absent is None
    assert "tests/serve/multimodal_profiles/vllm.py" in where and "(not a git checkout)" in where


def test_every_matrix_file_is_read_with_its_scripts_args_and_checks(tmp_path: Path) -> None:
    matrix = read_matrix(checkout(tmp_path))
    assert matrix.files == tuple(MATRIX)
    ids = {(e.stack, e.accelerator, e.id): e for e in matrix.entries}
    # test_sglang.py: multimodal configs only (not "aggregated", not the diffusion one)
    sglang = sorted(i for s, a, i in ids if s == "dynamo-sglang")
    assert sglang == [
        "mm_agg_router_qwen3-vl-2b",
        "mm_pd_qwen3-vl-2b",
        "multimodal_agg_fd_qwen",
        "multimodal_disagg_qwen",
        "multimodal_e_pd_qwen",
        "video_agg_qwen",
    ]
    agg = ids["dynamo-sglang", "cuda", "multimodal_agg_fd_qwen"]
    assert agg.script == "examples/backends/sglang/launch/agg_vision.sh"  # the renamed launcher
    assert agg.model_flag == "--model-path"
    assert agg.extra_args == ("--page-size", "1", "--frontend-decoding")
    assert agg.env == {"DYN_MM_ENABLE_LIBJPEG": "1"} and agg.topology is None
    assert agg.where == "tests/serve/test_sglang.py:57"
    e_pd = ids["dynamo-sglang", "cuda", "multimodal_e_pd_qwen"]
    assert (e_pd.cadence, e_pd.timeout_s, e_pd.payloads[0].expected) == (
        "pre_merge",
        206,  # the timeout mark, not the config's `timeout=360`
        ("image",),
    )
    pd = ids["dynamo-sglang", "cuda", "mm_pd_qwen3-vl-2b"]
    assert pd.script == "examples/backends/sglang/launch/disagg_same_gpu.sh"
    # XPU: the same ids as CUDA's, its own scripts, device markers and health checks
    xpu = ids["dynamo-vllm", "xpu", "mm_agg_router_qwen3-vl-2b"]
    assert xpu.script == "examples/backends/vllm/launch/xpu/agg_multimodal_router_xpu.sh"
    assert (xpu.gpu_marker, xpu.gpus, xpu.health_check_workers) == ("xpu_2", 2, 2)
    assert xpu.skip == "vLLM XPU lacks a paged decode kernel"
    assert xpu.script_args == ("--model", "Qwen/Qwen3-VL-2B-Instruct", "--block-size", "16")
    trt = ids["dynamo-trtllm", "cuda", "pd_multimodal"]
    assert trt.script == "examples/backends/trtllm/launch/disagg_multimodal.sh"
    assert trt.env == {"DYN_HEALTH_CHECK_ENABLED": "true"} and trt.health_check_workers == 2
    # topology by the file's key, else by what an EngineConfig's id names
    sglang_agg = matrix.for_topology("dynamo-sglang", "cuda", "agg")
    assert sglang_agg is not None and sglang_agg.script == agg.script  # by what its id names
    assert sglang_agg.where == "tests/serve/test_sglang.py:57"
    sglang_pd = matrix.for_topology("dynamo-sglang", "cuda", "pd")
    assert sglang_pd is not None and sglang_pd.script == pd.script  # by the file's map
    e_pd = matrix.for_topology("dynamo-vllm", "cuda", "e_pd")  # mapped, though no id uses it
    assert e_pd is not None and e_pd.script.endswith("/disagg_multimodal_e_pd.sh")
    assert matrix.for_topology("dynamo-vllm", "xpu", "epd") is None


def run_list(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "list", "--upstream", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )


def test_the_page_from_a_checkout_names_what_is_missing_here(tmp_path: Path) -> None:
    done = run_list("--dynamo-src", str(checkout(tmp_path)))
    assert done.returncode == 1, done.stderr  # an id with no case and no reason is a finding
    rows = {
        line.split("|")[1].strip(" `"): line for line in done.stdout.splitlines() if "| `" in line
    }
    assert "upstream runs it; no case here and no reason why" in rows["mm_agg_newfam-1b"]
    assert "same id, cadence, GPU count and checks" in rows["mm_agg_router_qwen3-vl-2b"]
    assert f"--dynamo-src {tmp_path}" in done.stdout.splitlines()[0]
    assert "- `checkout`: tests/serve/multimodal_profiles/vllm.py" in done.stdout


def test_a_checkout_without_the_files_or_with_broken_ones_is_named(tmp_path: Path) -> None:
    missing = run_list("--dynamo-src", str(tmp_path))
    assert missing.returncode == 2 and "tests/serve/multimodal_profiles/vllm.py" in missing.stderr
    assert "tests/serve/test_trtllm.py" in missing.stderr
    broken = checkout(tmp_path / "broken", vllm="VLLM_MULTIMODAL_PROFILES = [\n", only_vllm=True)
    done = run_list("--dynamo-src", str(broken))
    assert done.returncode == 2 and "vllm.py: not Python" in done.stderr and "line" in done.stderr
    no_profiles = checkout(tmp_path / "other", vllm="X = 1\n", only_vllm=True)
    with pytest.raises(UnreadableCheckout, match=r"no MultimodalModelProfile\(\.\.\.\)"):
        read_checkout(no_profiles, [])
    renamed = MATRIX[VLLM_FILE].replace('"p_d": "disagg_multimodal_p_d.sh",\n', "")
    renamed = renamed.replace('"agg": TopologyConfig(', '"p_d": TopologyConfig(', 1)
    shape = checkout(tmp_path / "shape", vllm=renamed, only_vllm=True)
    with pytest.raises(UnreadableCheckout, match=r"vllm\.py:\d+ \(qwen3-vl-2b, p_d\): no script"):
        read_checkout(shape, [])
    assert run_list("--dynamo-src", str(broken)).returncode == 2
    alone = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--dynamo-src", str(broken)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert alone.returncode == 2 and "--dynamo-src goes with --upstream" in alone.stderr


def test_a_renamed_id_and_a_repeat_written_as_a_second_payload_are_the_same_test() -> None:
    """Two upstream versions name SGLang P/D `mm_pd_qwen3-vl-2b` and `mm_pd_no_encoder_…`: a
    checkout carrying either joins our case (the catalogue's page shows one); upstream's
    video_e_pd_qwen writes its repeat as a second payload, ours as `repeat: 2`."""
    import dataclasses

    from harness.cli.main import DEFAULT_PROFILES, profiles_in
    from harness.profiles.upstream import parity

    profiles = profiles_in(DEFAULT_PROFILES)
    catalogue = upstream_tests()
    static = {row.id for row in parity(profiles, catalogue)}
    assert "mm_pd_qwen3-vl-2b" in static and "mm_pd_no_encoder_qwen3-vl-2b" not in static
    renamed = next(t for t in catalogue if t.id == "mm_pd_no_encoder_qwen3-vl-2b")
    from_checkout = dataclasses.replace(renamed, where="tests/serve/x.py:1", cadence="pre_merge")
    video = next(t for t in catalogue if t.id == "video_e_pd_qwen")
    rows = {
        r.id: r for r in parity(profiles, [from_checkout, dataclasses.replace(video, followups=1)])
    }
    assert rows["mm_pd_no_encoder_qwen3-vl-2b"].ours == "sglang_pd_qwen3-vl-2b / (no suffix)"
    assert rows["mm_pd_no_encoder_qwen3-vl-2b"].problem is None
    assert rows["video_e_pd_qwen"].problem is None
    two = parity(profiles, [dataclasses.replace(video, followups=2)])
    assert "follow-up request(s), upstream 2" in (next(r for r in two if r.upstream).problem or "")
