"""A first run's ETA comes from durations shipped with the repo (profiles/durations-cpu.json),
a later run's from the results earlier runs left; every CPU-tier case the suite runs is in the
shipped file, so its ETA is never a guess from the first case alone."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cases.progress_lines import CASE_MARK, ProgressCount
from harness.cases.selection import SHIPPED_DURATIONS, eta_durations
from harness.core.paths import REPO_ROOT
from harness.profiles import load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)


def test_every_cpu_case_the_suite_runs_has_a_shipped_duration() -> None:
    shipped = json.loads(SHIPPED_DURATIONS["cpu"].read_text())
    ids = {p.test_id(c) for p in PROFILES for c in p.cases if p.cpu is not None}
    assert ids <= shipped.keys(), (
        f"not in {SHIPPED_DURATIONS['cpu']}: {sorted(ids - shipped.keys())}"
    )
    assert 600 < sum(shipped.values()) < 1200  # a whole warm suite on 2 cores, in seconds


def test_the_first_runs_eta_is_the_shipped_sum_and_a_later_runs_its_own(tmp_path: Path) -> None:
    ids = ["mm_agg_qwen3-vl-2b", "mm_e_pd_qwen3-vl-2b", "mm_epd_qwen3-vl-2b"]
    shipped = eta_durations(None, tmp_path / "none.jsonl", "cpu")
    count = ProgressCount(ids, shipped)
    line = count.number(f"{CASE_MARK}mm_agg_qwen3-vl-2b\tpassed, 1.0 s\t1.0")
    left = shipped["mm_e_pd_qwen3-vl-2b"] + shipped["mm_epd_qwen3-vl-2b"]
    assert line.endswith(f"ETA {left // 60:.0f} min {left % 60:02.0f} s"), line
    results = tmp_path / "results.jsonl"
    results.write_text(
        json.dumps({"test_id": "mm_e_pd_qwen3-vl-2b", "duration_s": 5, "teardown_s": 1}) + "\n"
    )
    assert eta_durations(None, results, "cpu") == {"mm_e_pd_qwen3-vl-2b": 6.0}
    assert eta_durations(None, None, "gpu") == {}  # none shipped for the GPU tier
