"""Makespan of the serve suite split over N CI runners: `--shard` (LPT over launch/baseline units)
vs. splitting by file order, against a lower bound, for N = 1, 2, 4, 8.

Cases and units are the real profiles' (`harness.cases.selection.cadence_cases`, the selection
`pytest -m post_merge --shard K/N` splits). Each case costs its requests' time, and the first case
of a launch on a runner also pays the launch: a split that cuts a launch group starts it twice.

Times come from a results.jsonl (`--durations-from`: `ready_s` is the launch, the rest of a
case's `duration_s` its requests) or, for a case it lacks, the same budget-based default the
sharder uses (harness.cases.selection.UNKNOWN_*_SHARE). `--noise F` runs `--trials` draws in which
every actual time is the planned one x U(1-F, 1+F): the plan sees recorded times, the clock does
not.

Baselines, both contiguous runs of the file order (what pytest-split's chunking and a CI matrix
over test files do):
- file order, by count: N chunks of equal case count.
- file order, by time: cut where the running total passes k/N of the planned total.

Lower bound: max(total time with each launch once / N, longest unit). Goal: ours <= 1.1x at N=4.

    .venv/bin/python bench/shard_makespan.py [--tier gpu] [--cadence post_merge]
        [--durations-from runs/results.jsonl] [--noise 0.2 --trials 200]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.cases.case import ServeCase
from harness.cases.selection import (
    UNKNOWN_LAUNCH_SHARE,
    UNKNOWN_REQUEST_SHARE,
    cadence_cases,
    plan_shards,
    units,
)
from harness.profiles import load_profiles

REPO = Path(__file__).resolve().parents[1]
GOAL_RATIO = 1.1
GOAL_SHARDS = 4
SHARD_COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class CaseTimes:
    launch_s: dict[str | None, float]  # by launch signature
    request_s: dict[str, float]  # by test id

    def planned(self, cases: Sequence[ServeCase]) -> dict[str, float]:
        """What a results file of an unsharded run in file order would record per case."""
        seen: set[str | None] = set()
        out: dict[str, float] = {}
        for sc in cases:
            first = sc.signature not in seen
            seen.add(sc.signature)
            out[sc.test_id] = self.request_s[sc.test_id] + (
                self.launch_s[sc.signature] if first else 0.0
            )
        return out

    def shard_seconds(self, shard: Sequence[ServeCase]) -> float:
        launches = {sc.signature for sc in shard}
        return sum(self.request_s[sc.test_id] for sc in shard) + sum(
            self.launch_s[s] for s in launches
        )

    def jittered(self, rng: random.Random, noise: float) -> CaseTimes:
        def draw(v: float) -> float:
            return v * rng.uniform(1 - noise, 1 + noise)

        return CaseTimes(
            {k: draw(v) for k, v in self.launch_s.items()},
            {k: draw(v) for k, v in self.request_s.items()},
        )


def recorded(path: Path | None) -> dict[str, dict[str, Any]]:
    """The last row per test id of a results.jsonl, passed or failed (skips carry no time)."""
    rows: dict[str, dict[str, Any]] = {}
    if path is None or not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("outcome") in ("passed", "failed") and row.get("duration_s"):
                rows[row["test_id"]] = row
    return rows


def case_times(cases: Sequence[ServeCase], rows: Mapping[str, dict[str, Any]]) -> CaseTimes:
    launch: dict[str | None, float] = {}
    request: dict[str, float] = {}
    for sc in cases:
        spec = sc.profile.tier(sc.tier)
        assert spec is not None, sc.test_id
        row = rows.get(sc.test_id)
        if row is not None:
            fresh = not row.get("reused_topology") and row.get("ready_s") is not None
            ready = float(row["ready_s"]) if fresh else 0.0
            request[sc.test_id] = max(float(row["duration_s"]) - ready, 0.0)
            if fresh:
                launch[sc.signature] = max(launch.get(sc.signature, 0.0), ready)
        else:
            request[sc.test_id] = spec.budget.request_s * UNKNOWN_REQUEST_SHARE * len(sc.requests)
        if sc.signature not in launch or row is None:
            launch.setdefault(sc.signature, spec.budget.total_s * UNKNOWN_LAUNCH_SHARE)
    return CaseTimes(launch, request)


Split = list[list[ServeCase]]
Splitter = Callable[[Sequence[ServeCase], int, Mapping[str, float]], Split]


def by_shards(cases: Sequence[ServeCase], n: int, planned: Mapping[str, float]) -> Split:
    return plan_shards(cases, n, planned).shards


def by_count(cases: Sequence[ServeCase], n: int, planned: Mapping[str, float]) -> Split:
    size, extra = divmod(len(cases), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(list(cases[start:end]))
        start = end
    return out


def by_time(cases: Sequence[ServeCase], n: int, planned: Mapping[str, float]) -> Split:
    total = sum(planned.values())
    out: list[list[ServeCase]] = [[] for _ in range(n)]
    running = 0.0
    for sc in cases:
        k = min(int(running / total * n), n - 1) if total else 0
        out[k].append(sc)
        running += planned[sc.test_id]
    return out


SPLITTERS: dict[str, Splitter] = {
    "--shard (LPT + rebalance)": by_shards,
    "file order, by count": by_count,
    "file order, by time": by_time,
}


def lower_bound(cases: Sequence[ServeCase], times: CaseTimes, n: int) -> float:
    unit_s = [times.shard_seconds(u) for u in units(cases)]
    return max(sum(unit_s) / n, max(unit_s))


def relaunches(shards: Sequence[Sequence[ServeCase]]) -> int:
    """Launches started more than once across runners."""
    per_shard = [{sc.signature for sc in s} for s in shards]
    distinct = set().union(*per_shard)
    return sum(len(s) for s in per_shard) - len(distinct)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tier", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--cadence", default="post_merge")
    parser.add_argument("--durations-from", type=Path, default=None)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()

    cases = cadence_cases(load_profiles(REPO / "profiles", REPO), args.tier, args.cadence)
    rows = recorded(args.durations_from)
    times = case_times(cases, rows)
    planned = times.planned(cases)
    print(
        f"{len(cases)} {args.tier} {args.cadence} cases, {len(units(cases))} units, "
        f"{len(times.launch_s)} launches; times: {len(rows)} recorded "
        f"({args.durations_from or 'none'}), the rest from profile budgets; "
        f"noise +/-{args.noise:.0%} over {args.trials if args.noise else 1} trial(s)"
    )
    rng = random.Random(args.seed)
    trials = [times.jittered(rng, args.noise) for _ in range(args.trials)]
    trials = trials if args.noise else [times]
    ours_at_goal = 0.0
    for n in SHARD_COUNTS:
        print(f"N={n}")
        for name, split in SPLITTERS.items():
            shards = split(cases, n, planned)
            assert sorted(sc.test_id for s in shards for sc in s) == sorted(
                sc.test_id for sc in cases
            ), name
            ratios = []
            spans = []
            for actual in trials:
                span = max(actual.shard_seconds(s) for s in shards)
                spans.append(span)
                ratios.append(span / lower_bound(cases, actual, n))
            mean_ratio = sum(ratios) / len(ratios)
            worst = max(ratios)
            print(
                f"  {name:<26} makespan {sum(spans) / len(spans):7.0f} s  "
                f"/ bound {mean_ratio:.3f}x (worst {worst:.3f}x)  "
                f"relaunches {relaunches(shards)}"
            )
            if n == GOAL_SHARDS and split is by_shards:
                ours_at_goal = mean_ratio
    ok = ours_at_goal <= GOAL_RATIO
    print(
        f"goal: --shard <= {GOAL_RATIO}x the bound at N={GOAL_SHARDS}: "
        f"{ours_at_goal:.3f}x {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
