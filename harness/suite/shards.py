"""Splitting the selected serve cases over N CI runners (`--shard K/N`, or HARNESS_SHARD=K/N).

Cases that must run together form one unit: cases that share a launch (a launch is never started
twice), and a case with the baseline it is judged against (harness.suite.baseline_selection).
Units go to shards longest first, each to the least loaded shard (LPT), then units move or swap
out of the busiest shard while that lowers it; times are the durations a previous results.jsonl
recorded, and a case never recorded counts a default from its profile's budget. Same selection
and durations in, same shards out, on every runner.

Example: units of 300, 200, 120 and 90 s over 2 shards -> shard 1: 300 (+0), shard 2: 200 + 120,
then 90 goes to shard 1 (300 < 320): 390 s and 320 s.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.report.merge import manifest_path
from harness.suite.baseline_selection import given, needed
from harness.suite.serve_case import ServeCase

SHARD_ENV = "HARNESS_SHARD"
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# A case no results file has seen: a quarter of its tier's start budget for the launch (budgets
# are set at about 4x a measured start), and each request at a quarter of its request budget.
UNKNOWN_LAUNCH_SHARE = 0.25
UNKNOWN_REQUEST_SHARE = 0.25


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as CI matrices count
    count: int

    @classmethod
    def parse(cls, spec: str, where: str = "--shard") -> Shard:
        match = _SPEC.match(spec)
        if not match or not 1 <= int(match[1]) <= int(match[2]):
            raise ValueError(f"{where} {spec!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def from_env(cls) -> Shard | None:
        spec = os.environ.get(SHARD_ENV)
        return cls.parse(spec, SHARD_ENV) if spec else None

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def units(cases: Sequence[ServeCase]) -> list[list[ServeCase]]:
    """Groups of cases that must land on one shard, in first-seen order."""
    parent = list(range(len(cases)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    by_signature: dict[str, int] = {}
    for i, sc in enumerate(cases):
        key = sc.signature or sc.test_id
        if key in by_signature:
            join(i, by_signature[key])
        by_signature.setdefault(key, i)
    for i, consumer in enumerate(cases):
        for key in needed(consumer):
            for j, provider in enumerate(cases):
                if provider.signature != consumer.signature and key in given(provider):
                    join(i, j)
    groups: dict[int, list[ServeCase]] = {}
    for i, sc in enumerate(cases):
        groups.setdefault(find(i), []).append(sc)
    return list(groups.values())


def case_seconds(sc: ServeCase, durations: Mapping[str, float], first_of_launch: bool) -> float:
    if sc.test_id in durations:
        return durations[sc.test_id]
    spec = sc.profile.tier(sc.tier)
    if spec is None:
        return 0.0
    launch = spec.budget.total_s * UNKNOWN_LAUNCH_SHARE if first_of_launch else 0.0
    return launch + spec.budget.request_s * UNKNOWN_REQUEST_SHARE * len(sc.requests)


def unit_seconds(unit: Sequence[ServeCase], durations: Mapping[str, float]) -> float:
    seen: set[str | None] = set()
    total = 0.0
    for sc in unit:
        total += case_seconds(sc, durations, sc.signature not in seen)
        seen.add(sc.signature)
    return total


@dataclass(frozen=True)
class ShardPlan:
    shards: list[list[ServeCase]]
    seconds: list[float]

    def of(self, shard: Shard) -> list[ServeCase]:
        return self.shards[shard.index - 1]


def plan_shards(
    cases: Sequence[ServeCase], count: int, durations: Mapping[str, float]
) -> ShardPlan:
    """LPT over the units (longest first, each to the least loaded shard; ties: lowest index;
    equal units: their first test id), then `_rebalance`."""
    ranked = sorted(
        ((unit_seconds(u, durations), u) for u in units(cases)),
        key=lambda item: (-item[0], item[1][0].test_id),
    )
    bins: list[list[tuple[float, list[ServeCase]]]] = [[] for _ in range(count)]
    for item in ranked:
        target = min(range(count), key=lambda i: (_load(bins[i]), i))
        bins[target].append(item)
    _rebalance(bins)
    return ShardPlan(
        [[sc for _, unit in b for sc in unit] for b in bins],
        [round(_load(b), 1) for b in bins],
    )


def _load(shard: Sequence[tuple[float, list[ServeCase]]]) -> float:
    return sum(seconds for seconds, _ in shard)


def _rebalance(bins: list[list[tuple[float, list[ServeCase]]]]) -> None:
    """Moves or swaps units out of the most loaded shard while that lowers it and leaves the
    other shard below where it stood. LPT alone can be 4/3 - 1/(3N) of optimal (Graham 1969);
    on the GPU tier's units at N=4 it lands at 1.15x the bound and this brings it under 1.1x
    (bench/shard_makespan.py). Each step lowers the sorted loads lexicographically, so it ends."""
    while True:
        top = max(range(len(bins)), key=lambda i: (_load(bins[i]), -i))
        high = _load(bins[top])
        best: tuple[float, int, int, int | None] | None = None
        for other in range(len(bins)):
            if other == top:
                continue
            low = _load(bins[other])
            for i, (give, _) in enumerate(bins[top]):
                options = [(None, 0.0)] + [(j, take) for j, (take, _) in enumerate(bins[other])]
                for j, take in options:
                    peak = max(high - give + take, low + give - take)
                    if peak < high - 1e-9 and (best is None or peak < best[0]):
                        best = (peak, other, i, j)
        if best is None:
            return
        _, other, i, j = best
        unit = bins[top].pop(i)
        if j is not None:
            bins[top].append(bins[other].pop(j))
        bins[other].append(unit)


def write_manifest(results: Path, shard: Shard, plan: ShardPlan) -> None:
    """What every shard of this selection runs, next to this shard's results file."""
    results.parent.mkdir(parents=True, exist_ok=True)
    manifest = {
        "shard": str(shard),
        "shards": [[sc.test_id for sc in cases] for cases in plan.shards],
        "predicted_s": plan.seconds,
    }
    manifest_path(results).write_text(json.dumps(manifest, indent=1) + "\n")
