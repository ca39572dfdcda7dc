"""`python -m harness list`: test ids, marks, hardware needs and CPU skip reasons."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness.__main__ import main
from harness.core.paths import REPO_ROOT
from harness.core.precision import PRECISIONS
from harness.profiles.upstream import upstream_ids


def test_gpu_rows_carry_marks_and_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--tier", "gpu", "--json"]) == 0
    rows = {r["test_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    row = rows["mm_epd_qwen3-vl-2b_b64_frontend_decoding"]
    assert row["marks"] == ["post_merge", "multimodal", "vllm", "gpu_1", "upstream"]
    assert row["hardware"].startswith(
        "gpu_1 runner, 1 GPU(s) of >= 24 GiB: #0 20.2 GiB (encode 3.9 + prefill 8.1 + decode 8.1)"
    )
    assert row["tier"] == "gpu" and row["skip"] is None


def test_cpu_listing_shows_skip_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--tier", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding" in out
    assert "skipped: GPU tier only: frontend video decoding needs" in out
    assert "[gpu]" not in out


def test_the_listing_names_each_upstream_id_not_carried_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--tier", "gpu"]) == 0
    out = capsys.readouterr().out
    tail = out[out.index("upstream ids not carried here (") :]
    assert "  mm_agg_gemma4-e2b-it [vllm xpu, pre_merge]: not yet carried on XPU" in tail
    assert "mm_agg_gemma4-e2b-it [vllm, " not in tail  # carried on the CPU tier (float32)
    assert "  mm_agg_qwen3.5-0.8b [vllm xpu, post_merge]: not yet carried on XPU" in tail
    assert "mm_agg_qwen3.5-0.8b [vllm, " not in tail  # carried on the CPU tier (bfloat16)
    assert "mm_agg_qwen3-vl-2b [vllm," not in tail  # carried: listed above with its oracles
    assert "  mm_agg_router_qwen2-vl-2b [vllm xpu, post_merge]: skipped upstream (vLLM XPU" in tail


def test_missing_profiles_dir(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--profiles", "/nonexistent"]) == 2
    assert "--profiles: no such directory /nonexistent" in capsys.readouterr().err


def test_every_200_answer_meets_an_oracle_that_reads_its_content() -> None:
    from harness.core.paths import REPO_ROOT
    from harness.oracles.registry import case_oracles
    from harness.profiles import Tier, load_profiles

    tiers: tuple[Tier, ...] = ("cpu", "gpu")
    unread = [
        (p.test_id(c), tier, i)
        for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
        for tier in tiers
        if p.tier(tier) is not None
        for c in p.cases
        for i, o in enumerate(case_oracles(c, tier, p))
        if o.status == 200 and not o.content
    ]
    assert unread == []


def test_list_shows_each_requests_oracles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--tier", "cpu", "--json"]) == 0
    rows = {r["test_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    bad = rows["mm_agg_qwen3-vl-2b_bad_input"]["oracles"]
    assert bad[0] == "HTTP 400 naming the error"
    tolerance = PRECISIONS["float32"].logprob_tolerance
    assert bad[2] == (
        "status 200, structure, prompt tokens, role prompts, "
        "matches its engine alone (tokens exact, logprobs within 0.0001), "
        "matches the model's own answer, "
        f"logprobs within {tolerance:g} of the model's own, top-5, path, "
        "other media answers differently, other transport answers the same"
    )


def test_upstream_parity_holds_and_its_page_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """Every upstream id is here with its cadence and GPU count, or says why it is not; the
    generated page in docs/ is what the command prints now."""
    from harness.core.paths import REPO_ROOT

    assert main(["list", "--upstream"]) == 0
    page = capsys.readouterr().out
    assert "MISMATCH" not in page and "no case here and no reason why" not in page
    assert (
        "| `mm_p_d_qwen3-vl-2b` | vllm | post_merge | 1 | vllm-newest | "
        "p_d_qwen3-vl-2b / (no suffix) |"
    ) in page
    assert (REPO_ROOT / "docs" / "reference" / "upstream-parity.md").read_text() == page, (
        "regenerate: serve-harness list --upstream > docs/reference/upstream-parity.md"
    )


def test_a_cadence_mismatch_is_named(tmp_path: object) -> None:
    from harness.core.paths import REPO_ROOT
    from harness.profiles import load_profiles
    from harness.profiles.upstream import UpstreamTest, parity

    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    rows = parity(
        profiles,
        [
            UpstreamTest("mm_p_d_qwen3-vl-2b", "pre_merge", 2),
            UpstreamTest("mm_gone_qwen3-vl-2b", "post_merge", 1),
        ],
    )
    assert rows[0].problem == "cadence ['post_merge'], upstream pre_merge; 1 GPU(s), upstream 2"
    assert rows[1].problem == "upstream runs it; no case here and no reason why"


def test_a_check_upstream_makes_that_ours_lacks_is_named() -> None:
    """Each fact the catalogue records (model, cache-hit threshold, follow-ups, stack) is
    compared with our case: one it lacks is a problem, one it declares differing is not; a
    stricter threshold of ours checks what upstream's does."""
    from harness.core.paths import REPO_ROOT
    from harness.profiles import load_profiles
    from harness.profiles.upstream import UpstreamTest, parity

    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    router, video = "mm_agg_router_qwen3-vl-2b", "mm_epd_video_qwen3-vl-2b_mixed_frontend_decoding"
    rows = [
        parity(profiles, [test])[0]
        for test in [
            UpstreamTest(router, "post_merge", 1, min_avg_kv_hit_rate=0.95),
            UpstreamTest(router, "post_merge", 1, model="Qwen/Qwen3-VL-2B-Instruct"),
            UpstreamTest(
                router,
                "post_merge",
                1,
                model="Qwen/Qwen3-VL-2B-Instruct",
                model_differs="a reason",
                min_avg_kv_hit_rate=0.9,
            ),
            UpstreamTest(video, "post_merge", 1, followups=2),
            UpstreamTest(
                "mm_pd_qwen3-vl-2b",
                "pre_merge",
                1,
                stack="dynamo-sglang",
                here="mm_sglang_pd_qwen3-vl-2b",
                min_avg_kv_hit_rate=0.9,
            ),
        ]
    ]
    assert rows[0].problem == "cache-hit threshold 0.9, upstream 0.95"
    assert rows[1].problem == (
        "serves Qwen/Qwen3-VL-2B-Instruct-FP8, upstream Qwen/Qwen3-VL-2B-Instruct"
    )  # ours 0.9 where upstream sets none: not a problem
    assert rows[2].problem is None
    assert rows[3].problem == "1 follow-up request(s), upstream 2"
    assert rows[4].problem == "cache-hit threshold None, upstream 0.9"


def test_upstream_ids_are_tagged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--tier", "gpu"]) == 0
    lines = {
        line.split()[0]: line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  mm_") or line.startswith("  multimodal_")
    }
    assert lines["mm_epd_qwen3-vl-2b"].endswith("[upstream id]")
    assert lines["multimodal_e_pd_fd_qwen"].endswith("[upstream id]")
    assert "[upstream id]" not in lines["mm_p_d_qwen3-vl-2b_b64"]  # ours only


def test_the_pre_merge_gate_lists_what_runs_and_why_the_rest_does_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--tier", "cpu", "--cadence", "pre_merge"]) == 0
    out = capsys.readouterr().out
    gate = out[out.index("upstream's pre_merge ids on the cpu tier: ") :]
    total, run, not_run = map(int, re.findall(r"\d+", gate.splitlines()[0]))
    assert total == run + not_run and run >= 5
    assert "  run: mm_agg_router_qwen3.5-0.8b\n" in gate
    assert gate.count("  run: mm_agg_gemma4-e2b-it\n") == 1  # not again for XPU's file
    assert "  run: mm_agg_gemma4-e2b-it\n" in gate
    assert "  run: mm_agg_gemma4-e2b-it_uuid_passthrough\n" in gate
    assert "  run: video_e_pd_qwen\n" in gate  # judged on CPU since the layout defect was found
    assert "  mm_agg_video_qwen3-vl-2b_frontend_decoding [vllm]: skipped on the cpu tier: " in gate
    assert 'run them: scripts/serve-suite --tier cpu -m "pre_merge and upstream"' in gate
    listed = out[: out.index("CPU-tier precisions")]
    assert "mm_agg_qwen3.5-0.8b " not in listed  # post_merge only: not in the gate's listing
    assert "bfloat16 (qwen3_5): logprob tolerance 1.43, near-ties allowed" in out


def test_the_upstream_mark_selects_the_gates_ids(capsys: pytest.CaptureFixture[str]) -> None:
    """`pytest -m "pre_merge and upstream and cpu"` collects every id the gate runs here, and
    only upstream's ids (the skipped ones are collected and skip with the gate's reason)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/serve", "--collect-only", "-q", "-p",
         "no:cacheprovider", "-m", "pre_merge and upstream and cpu"],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    collected = set(re.findall(r"test_serve\[([^\]]+)\]", done.stdout))
    assert main(["list", "--tier", "cpu", "--cadence", "pre_merge"]) == 0
    run = set(re.findall(r"^  run: (\S+)$", capsys.readouterr().out, re.MULTILINE))
    assert run and run <= collected, done.stdout
    baselines = re.search(
        r"pulled in \d+ baseline case\(s\) the selection left out: (.*)", done.stdout
    )
    pulled = set(baselines.group(1).split(", ")) if baselines else set()
    assert collected - pulled <= upstream_ids()
    assert "mm_sglang_epd_qwen3-vl-2b_b64" not in collected  # pre_merge, but ours only
