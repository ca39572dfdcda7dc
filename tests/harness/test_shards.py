"""--shard K/N: every case in exactly one shard, launches and baselines kept together, balanced by
recorded durations (or budget defaults), the same split on every runner; a manifest beside the
results; `harness list --shard` prints a shard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.selection import (
    UNKNOWN_LAUNCH_SHARE,
    UNKNOWN_REQUEST_SHARE,
    Shard,
    cadence_cases,
    case_seconds,
    given,
    needed,
    plan_shards,
    units,
    write_manifest,
)
from harness.core.paths import REPO_ROOT
from harness.profiles import Tier, load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)


def selection(tier: Tier) -> list[ServeCase]:
    return cadence_cases(PROFILES, tier, "post_merge")


@pytest.mark.parametrize("tier", ["cpu", "gpu"])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 8])
def test_each_case_once_with_its_launch_and_its_baseline(tier: Tier, count: int) -> None:
    cases = selection(tier)
    shards = plan_shards(cases, count, {}).shards
    assert len(shards) == count
    placed = [sc.test_id for shard in shards for sc in shard]
    assert sorted(placed) == sorted(sc.test_id for sc in cases)
    home = {sc.test_id: k for k, shard in enumerate(shards) for sc in shard}
    for sc in cases:
        for other in cases:
            same_launch = sc.signature is not None and sc.signature == other.signature
            judged_against = bool(needed(sc) & given(other))
            if same_launch or judged_against:
                assert home[sc.test_id] == home[other.test_id], (sc.test_id, other.test_id)


def test_cpu_baselines_bind_launches_into_one_unit() -> None:
    """The E/P/D cases are judged against the agg answer on CPU, so they share a unit with it."""
    qwen_unit = next(
        u for u in units(selection("cpu")) if any(sc.test_id == "mm_agg_qwen3-vl-2b" for sc in u)
    )
    assert {"mm_epd_qwen3-vl-2b", "mm_e_pd_qwen3-vl-2b"} <= {sc.test_id for sc in qwen_unit}
    assert len({sc.signature for sc in qwen_unit}) > 1


def test_unknown_cases_cost_a_share_of_their_budget() -> None:
    sc = selection("gpu")[0]
    spec = sc.profile.tier("gpu")
    assert spec is not None
    budget = spec.budget
    request_part = budget.request_s * UNKNOWN_REQUEST_SHARE * len(sc.requests)
    assert case_seconds(sc, {}, first_of_launch=False) == pytest.approx(request_part)
    assert case_seconds(sc, {}, first_of_launch=True) == pytest.approx(
        budget.total_s * UNKNOWN_LAUNCH_SHARE + request_part
    )
    assert case_seconds(sc, {sc.test_id: 7.5}, first_of_launch=True) == 7.5


def five_units_timed(seconds: list[float]) -> tuple[list[ServeCase], dict[str, float]]:
    """Five real units, each costing one of `seconds` (all on its first case)."""
    chosen = units(selection("gpu"))[: len(seconds)]
    assert len(chosen) == len(seconds)
    durations = {sc.test_id: 0.0 for u in chosen for sc in u}
    for unit, s in zip(chosen, seconds, strict=True):
        durations[unit[0].test_id] = s
    return [sc for u in chosen for sc in u], durations


def test_recorded_durations_balance_the_shards() -> None:
    """3,3,2,2,2 over two shards: LPT alone gives 7 | 5; the swap step finds 6 | 6."""
    cases, durations = five_units_timed([300, 300, 200, 200, 200])
    plan = plan_shards(cases, 2, durations)
    assert plan.seconds == [600.0, 600.0]
    assert sum(len(s) for s in plan.shards) == len(cases)


def test_the_split_is_the_same_for_the_same_inputs() -> None:
    cases, durations = five_units_timed([120, 90, 90, 60, 30])
    first = plan_shards(cases, 3, durations)
    again = plan_shards(list(cases), 3, dict(durations))
    assert [[sc.test_id for sc in s] for s in first.shards] == [
        [sc.test_id for sc in s] for s in again.shards
    ]


@pytest.mark.parametrize("spec", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_bad_shard_spec_is_named(spec: str) -> None:
    with pytest.raises(ValueError, match=r"HARNESS_SHARD .*K/N"):
        Shard.parse(spec, "HARNESS_SHARD")


def test_manifest_lists_every_shard(tmp_path: Path) -> None:
    cases = selection("cpu")
    plan = plan_shards(cases, 2, {})
    results = tmp_path / "out" / "results.jsonl"
    write_manifest(results, Shard(2, 2), plan)
    manifest = json.loads((tmp_path / "out" / "results.shard.json").read_text())
    assert manifest["shard"] == "2/2"
    listed = [test_id for ids in manifest["shards"] for test_id in ids]
    assert sorted(listed) == sorted(sc.test_id for sc in cases)
    assert manifest["predicted_s"] == plan.seconds


def test_harness_list_prints_a_shard(tmp_path: Path) -> None:
    """With no recorded durations (a first run) it prints the budget-default split."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "list",
            "--shard",
            "2/2",
            "--tier",
            "cpu",
            "--durations-from",
            str(tmp_path / "none.jsonl"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    plan = plan_shards(selection("cpu"), 2, {})
    assert done.stdout.splitlines()[0].startswith(
        f"shard 2/2 (cpu, post_merge): {len(plan.shards[1])} case(s)"
    )
    assert [line.strip() for line in done.stdout.splitlines()[1:]] == [
        sc.test_id for sc in plan.shards[1]
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--shard", "3/2"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--shard '3/2'" in bad.stderr


SERVE = [
    sys.executable,
    "-m",
    "pytest",
    "tests/serve",
    "-m",
    "post_merge",
    "-p",
    "no:cacheprovider",
]


@pytest.mark.parametrize(("ids", "code"), [("mm_xpu_epd_qwen3-vl-2b", 0), ("no_such_id", None)])
def test_a_shard_the_plan_left_empty_passes(ids: str, code: int | None) -> None:
    """One case over two shards (a CI matrix of N shards, one stack's few ids): the empty shard
    exits 0, not pytest's 'no tests collected' (5); a selection of nothing is still refused."""
    done = subprocess.run(
        [*SERVE, "--tier", "cpu", "--ids", ids, "--shard", "2/2", "-q"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(done.stdout[-600:])
    if code is None:
        assert done.returncode != 0
    else:
        assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
        assert "serve-harness shard 2/2: 0 case(s)" in done.stdout
