"""`-k epd` pulls the baselines its cases are judged against back in (and says so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.selection import pull_in
from harness.core.paths import REPO_ROOT, sglang_python
from harness.profiles import load_profiles
from tests.harness.dynamo_checkout import build_checkout

CASES = [
    ServeCase(p, c, "cpu")
    for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    for c in p.cases
]


def test_epd_selection_pulls_in_the_e_pd_and_agg_answers_it_compares_with() -> None:
    selected = [sc for sc in CASES if "epd" in sc.test_id]
    rest = [sc for sc in CASES if sc not in selected]
    assert [sc.test_id for sc in pull_in(selected, rest)] == [
        "mm_sglang_agg_qwen3-vl-2b",  # SGLang E/P/D's agg, its own stack's
        "mm_e_pd_qwen3-vl-2b",
        "mm_agg_video_qwen3-vl-2b",
        "mm_agg_qwen3-vl-2b",
    ]
    assert pull_in(CASES, []) == []  # a full selection already holds every baseline


def test_a_sibling_judged_against_the_same_baseline_does_not_give_it() -> None:
    """The XPU agg cases are compared with the CUDA agg profile's answers (`same_as: agg`); their
    frontend-decoding siblings record agg-keyed answers too, but are judged against the same
    baseline, so the CUDA agg case is pulled in (seen missing under --dynamo-src, 2026-12-05)."""
    xpu = [sc for sc in CASES if sc.test_id.startswith("mm_xpu_agg_qwen3-vl-2b")]
    rest = [sc for sc in CASES if sc not in xpu]
    assert "mm_agg_qwen3-vl-2b" in [sc.test_id for sc in pull_in(xpu, rest)]


def test_a_baseline_from_the_same_launch_does_not_count() -> None:
    """E/PD's frontend-decoding case is judged against the plain E/PD launch, never itself."""
    fd = next(sc for sc in CASES if sc.test_id == "mm_e_pd_qwen3-vl-2b_b64_frontend_decoding")
    rest = [sc for sc in CASES if sc is not fd]
    assert [sc.test_id for sc in pull_in([fd], rest)] == [
        "mm_e_pd_qwen3-vl-2b",
        "mm_agg_qwen3-vl-2b",
    ]


def test_collection_reports_what_it_pulled_in() -> None:
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "tests/serve", "-m", "post_merge"),
            *("--collect-only", "-q", "-p", "no:cacheprovider"),
            "--tier",
            "cpu",
            "-k",
            "epd and not sglang",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_serve[mm_e_pd_qwen3-vl-2b]" in run.stdout
    pulled = "mm_e_pd_qwen3-vl-2b, mm_agg_video_qwen3-vl-2b, mm_agg_qwen3-vl-2b"
    assert f"serve-harness pulled in 3 baseline case(s) the selection left out: {pulled}" in (
        run.stdout
    )


def collect(*args: str, path: str = "tests/serve") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            path,
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--tier",
            "cpu",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ids_select_exactly_those_cases_and_pull_in_their_baselines() -> None:
    # a node id would leave the E/PD baseline out, and the case would fail for want of it
    run = collect("--ids", "mm_epd_qwen3-vl-2b, mm_agg_llava-1.5-7b")
    assert run.returncode == 0, run.stdout + run.stderr
    collected = [line.split("[")[1].rstrip("]") for line in run.stdout.splitlines() if "[" in line]
    assert sorted(collected) == [
        "mm_agg_llava-1.5-7b",
        "mm_agg_qwen3-vl-2b",
        "mm_e_pd_qwen3-vl-2b",
        "mm_epd_qwen3-vl-2b",
    ]
    assert (
        "pulled in 2 baseline case(s) the selection left out: mm_e_pd_qwen3-vl-2b, "
        "mm_agg_qwen3-vl-2b"
    ) in run.stdout


def test_ids_leave_out_the_harness_tests_beside_them() -> None:
    run = collect("--ids", "mm_agg_llava-1.5-7b", path="tests")  # as `harness docker -- --ids`
    assert run.returncode == 0, run.stdout + run.stderr
    assert [line for line in run.stdout.splitlines() if "::" in line] == [
        "tests/serve/test_serve.py::test_serve[mm_agg_llava-1.5-7b]"
    ]


def test_an_id_outside_the_selection_is_a_usage_error() -> None:
    run = collect("-m", "pre_merge", "--ids", "mm_epd_llava-1.5-7b")
    assert run.returncode == 4
    assert "--ids: mm_epd_llava-1.5-7b not among the selected serve cases" in run.stderr


def test_each_shipped_id_alone_brings_every_baseline_it_needs_transitively() -> None:
    """Selecting any one CPU id runs it with every case whose answers it (or a case pulled in
    for it) is compared with: no pulled-in case can fail for want of a baseline."""
    from harness.cases.selection import given, needed

    runnable = [sc for sc in CASES if not sc.skip_reason(None)]
    for sc in runnable:
        rest = [other for other in runnable if other is not sc]
        chosen = [sc, *pull_in([sc], rest)]
        for consumer in chosen:
            for key in needed(consumer):
                ran = [c.test_id for c in chosen]
                assert any(key in given(p) and p.signature != consumer.signature for p in chosen), (
                    f"{sc.test_id}: {consumer.test_id} needs {key[2]}, not in {ran}"
                )


@pytest.mark.parametrize(
    ("shapes", "selected", "pulled", "on_ours"),
    [
        # the seed's checkout: its E/P/D launcher alone, no matrix (no E/PD or agg launcher)
        (
            False,
            "mm_epd_qwen3-vl-2b",
            "mm_e_pd_qwen3-vl-2b, mm_agg_qwen3-vl-2b",
            ["mm_e_pd_qwen3-vl-2b", "mm_agg_qwen3-vl-2b"],
        ),
        # upstream's current launchers, no matrix: SGLang's agg launcher is renamed there
        (True, "multimodal_e_pd_qwen", "mm_sglang_agg_qwen3-vl-2b", ["mm_sglang_agg_qwen3-vl-2b"]),
    ],
    ids=["epd_launcher_alone", "upstream_launchers"],
)
def test_a_checkout_pulls_in_the_same_baselines_whatever_launchers_it_holds(
    tmp_path: Path, shapes: bool, selected: str, pulled: str, on_ours: list[str]
) -> None:
    """Under --dynamo-src the selection's baselines come in as they do without it, transitively;
    where the checkout holds no launcher for a baseline's topology, ours runs it on the
    checkout's Python and the summary says so."""
    if shapes and not sglang_python().exists():
        pytest.skip("the CPU tier's SGLang venv is not built here (the checkout copies its Dynamo)")
    checkout = build_checkout(tmp_path / "dynamo", shapes=shapes)
    run = collect("--dynamo-src", str(checkout), "--ids", selected)
    assert run.returncode == 0, run.stdout + run.stderr
    n = len(on_ours)
    assert f"pulled in {n} baseline case(s) the selection left out: {pulled}" in run.stdout
    for tid in on_ours:
        assert f"  {tid}: ours, as a baseline on the checkout's Python (the checkout" in run.stdout


def test_a_selected_case_the_checkout_has_no_launcher_for_runs_as_a_baseline_where_needed(
    tmp_path: Path,
) -> None:
    """The whole suite on a checkout with only the E/P/D launcher: the agg and E/PD cases the
    E/P/D cases are judged against run (ours, as baselines); a case no selected case needs
    still skips, naming the launcher the checkout lacks."""
    checkout = build_checkout(tmp_path / "dynamo")
    run = collect("--dynamo-src", str(checkout), "-k", "qwen3-vl-2b and not sglang", "-rs")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "  mm_agg_qwen3-vl-2b: ours, as a baseline on the checkout's Python" in run.stdout
    assert "  mm_e_pd_qwen3-vl-2b: ours, as a baseline on the checkout's Python" in run.stdout
    assert "  mm_p_d_qwen3-vl-2b: the checkout has no launcher for vLLM p_d" in run.stdout
