"""`serve-harness list --upstream --dynamo-src PATH`: upstream's multimodal ids read from a
checkout's profile files (harness/profiles/upstream_checkout.py), joined with the catalogue for
what a file cannot say, and the ids nothing here carries nor explains reported as findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.profiles.upstream import upstream_tests
from harness.profiles.upstream_checkout import PROFILE_FILES, UnreadableCheckout, read_checkout
from tests.harness.upstream_profile_files import SGLANG, VLLM


def checkout(root: Path, vllm: str = VLLM, sglang: str | None = SGLANG) -> Path:
    for stack, text in (("dynamo-vllm", vllm), ("dynamo-sglang", sglang)):
        if text is not None:
            path = root / PROFILE_FILES[stack]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return root


def test_each_id_upstreams_generator_makes_with_its_literal_facts(tmp_path: Path) -> None:
    tests, where = read_checkout(checkout(tmp_path), upstream_tests())
    by_id = {(t.stack, t.id): t for t in tests}
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
    broken = checkout(tmp_path / "broken", vllm="VLLM_MULTIMODAL_PROFILES = [\n", sglang=None)
    done = run_list("--dynamo-src", str(broken))
    assert done.returncode == 2 and "vllm.py: not Python" in done.stderr and "line" in done.stderr
    no_profiles = checkout(tmp_path / "other", vllm="X = 1\n", sglang=None)
    with pytest.raises(UnreadableCheckout, match=r"no MultimodalModelProfile\(\.\.\.\)"):
        read_checkout(no_profiles, [])
    assert run_list("--dynamo-src", str(broken)).returncode == 2
    alone = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--dynamo-src", str(broken)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert alone.returncode == 2 and "--dynamo-src goes with --upstream" in alone.stderr
