"""Which serve cases run, in which order, and on which shard.

- Order. Cases of one launch signature always stay together. CPU tier: baselines first, plain
  launches before flagged ones, so the cross-topology checks find their baseline in the same
  session; the order follows the profiles' `same_as` data, not topology names (a topology whose
  cases are judged against another's runs after it). GPU tier: the longest launch groups first
  (LPT, from a previous run's results.jsonl), which keeps the makespan of a parallel run close
  to its lower bound (bench/gpu_makespan.py). The orders are small strategies
  (xdist-scheduler style): `FileOrder`, `LongestFirst`.
- Baselines pulled in. A selection that leaves out a baseline still judges: the cases a
  selected case is compared with (`cpu.same_as`) are pulled back in when `-k`/`-m` deselected
  them. Example: `-k epd` selects the E/P/D cases, whose image answers must equal E/PD's and
  whose video answers must equal agg's; the E/PD and agg cases that give those answers are
  pulled back in and reported as such, instead of four cases failing with "no e_pd baseline
  recorded"; E/PD's own answers must equal agg's, so its agg case comes too.
- Shards (`--shard K/N`, or HARNESS_SHARD=K/N). Cases that must run together form one unit:
  cases that share a launch (a launch is never started twice), and a case with the baseline it
  is judged against. Units go to shards longest first, each to the least loaded shard (LPT),
  then units move or swap out of the busiest shard while that lowers it; times are the
  durations a previous results.jsonl recorded, and a case never recorded counts a default from
  its profile's budget. Same selection and durations in, same shards out, on every runner.
  Example: units of 300, 200, 120 and 90 s over 2 shards -> shard 1: 300 (+0), shard 2: 200 +
  120, then 90 goes to shard 1 (300 < 320): 390 s and 320 s."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.cases.case import ServeCase
from harness.profiles import Profile, Tier
from harness.profiles.load import cadence_marks
from harness.report.results import manifest_path


def cadence_cases(profiles: list[Profile], tier: Tier, cadence: str) -> list[ServeCase]:
    """The cases `pytest -m <cadence>` runs on `tier`, in file order, less those no machine
    could run (what `--shard` splits)."""
    cases = [ServeCase(p, c, tier) for p in profiles for c in p.cases]
    return [
        sc
        for sc in cases
        if cadence in cadence_marks(sc.profile, tier, sc.case) and not sc.skip_reason(None)
    ]


class CaseOrder(Protocol):
    """Orders test ids before they are handed to workers (xdist-scheduler style)."""

    def order(self, test_ids: Sequence[str]) -> list[str]: ...


class FileOrder:
    """Keeps collection order."""

    def order(self, test_ids: Sequence[str]) -> list[str]:
        return list(test_ids)


@dataclass(frozen=True)
class LongestFirst:
    """Longest known duration first (LPT list scheduling); unknown ids count `default_s`.

    Ties keep collection order. Example:
        LongestFirst({"t::a": 60, "t::b": 600}, default_s=300).order(["t::a", "t::b", "t::c"])
        == ["t::b", "t::c", "t::a"]
    """

    durations: Mapping[str, float]
    default_s: float = 300.0

    def order(self, test_ids: Sequence[str]) -> list[str]:
        return sorted(test_ids, key=lambda t: -self.durations.get(t, self.default_s))


DEFAULT_GROUP_S = 300.0


# What each CPU-tier case took in a whole serve-suite run on a 2-core box (duration + teardown,
# 2026-12-06), shipped so that a first run's ETA is right; `serve-harness report RESULTS
# --durations profiles/durations-cpu.json` writes it anew from a run.
SHIPPED_DURATIONS = {"cpu": Path(__file__).resolve().parents[2] / "profiles" / "durations-cpu.json"}


def eta_durations(given: Path | None, results: Path | None, tier: str) -> dict[str, float]:
    """What the ETA counts each case by: `--durations-from`, else the results earlier runs
    appended to this run's results file, else the durations shipped for the tier."""
    for path in (given, results):
        if path is not None and path.is_file() and (found := recorded_durations(path)):
            return found
    shipped = SHIPPED_DURATIONS.get(tier)
    if shipped is None or not shipped.is_file():
        return {}
    return {k: float(v) for k, v in json.loads(shipped.read_text()).items()}


def recorded_durations(path: Path | None) -> dict[str, float]:
    """test id -> seconds, from a results.jsonl; missing or unreadable files give {}."""
    if path is None or not path.is_file():
        return {}
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            out[record["test_id"]] = float(record["duration_s"]) + float(
                record.get("teardown_s") or 0
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out


def baseline_depths(cases: Sequence[ServeCase]) -> dict[tuple[str, str, str], int]:
    """(stack, model, topology) -> how many baselines deep it is: 0 when none of its cases is
    judged against another topology, else one more than the deepest it is judged against.
    Example: agg 0, e_pd (same_as agg) 1, epd (same_as e_pd) 2."""
    wants: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for sc in cases:
        p = sc.profile
        own = (p.stack, p.model.short_name, p.topology)
        for request in (sc.case, *sc.case.follow_ups):
            if request.cpu.same_as and request.cpu.same_as != p.topology:
                wants[own].add(request.cpu.same_as)
        wants.setdefault(own, set())
    depths: dict[tuple[str, str, str], int] = {}

    def depth(key: tuple[str, str, str], seen: frozenset[str] = frozenset()) -> int:
        if key not in depths:
            stack, model, topology = key
            below = [
                depth((stack, model, t), seen | {topology})
                for t in wants.get(key, ())
                if t not in seen
            ]
            depths[key] = 1 + max(below) if below else 0
        return depths[key]

    for key in list(wants):
        depth(key)
    return depths


def order_key(
    cases: Sequence[ServeCase], durations: dict[str, float]
) -> Callable[[ServeCase], tuple[Any, ...]]:
    """A sort key for these cases (signature groups never split)."""
    rank: dict[str, int] = {}
    group_s: dict[str, float] = defaultdict(float)
    depths = baseline_depths(cases)
    for sc in cases:
        sig = sc.signature or ""
        p = sc.profile
        own = depths.get((p.stack, p.model.short_name, p.topology), 0)
        rank[sig] = max(rank.get(sig, 0), own)  # after every baseline any of its cases needs
        group_s[sig] += durations.get(sc.test_id, DEFAULT_GROUP_S / 4)
    lpt = {
        sig: i for i, sig in enumerate(LongestFirst(group_s, DEFAULT_GROUP_S).order(list(group_s)))
    }

    def key(sc: ServeCase) -> tuple[Any, ...]:
        sig = sc.signature or ""
        if sc.tier == "gpu":
            return (lpt[sig], len(sc.case.launcher_args), sc.test_id)
        model = sc.profile.model.short_name
        return (sc.profile.stack, model, rank[sig], len(sc.case.launcher_args), sig)

    return key


Key = tuple[str, str, str, str]  # (stack, model, topology, request fingerprint)


def needed(sc: ServeCase) -> set[Key]:
    """Baseline answers this case is judged against."""
    if sc.tier != "cpu" or sc.profile.cpu is None:
        return set()
    p = sc.profile
    return {
        (p.stack, p.model.short_name, r.cpu.same_as, r.fingerprint)
        for r in sc.requests
        if r.cpu.same_as and r.cpu.status == 200
    }


def given(sc: ServeCase) -> set[Key]:
    """Baseline answers this case records when it runs."""
    p = sc.profile
    return {
        (p.stack, p.model.short_name, p.topology, r.fingerprint)
        for r in sc.requests
        if r.cpu.status == 200
    }


def provides(sc: ServeCase, key: Key) -> bool:
    """`sc` records the baseline `key` and is not itself judged against it."""
    return key in given(sc) and key not in needed(sc)


def pull_in(selected: Sequence[ServeCase], deselected: Sequence[ServeCase]) -> list[ServeCase]:
    """The deselected cases that give a baseline some selected case needs and no selected case
    of another launch gives (a baseline from the same launch does not count, nor one from a case
    that is itself judged against that baseline: an XPU agg case is compared with the CUDA agg
    profile's answer, not with its XPU sibling's), transitively: a pulled-in case brings its own
    baselines (E/P/D pulls in E/PD, which pulls in agg). Each comes back `as_baseline()`: under
    a Dynamo checkout that holds no launcher for it, ours runs it on the checkout's Python, so
    what a checkout holds never decides whether a selected case is judged."""
    pulled: list[ServeCase] = []
    candidates = [d.as_baseline() for d in deselected]
    consumers = list(selected)
    for consumer in consumers:  # grows as cases are pulled in
        for key in sorted(needed(consumer)):
            providers = [*selected, *pulled]
            if any(provides(p, key) and p.signature != consumer.signature for p in providers):
                continue
            match = next(
                (
                    d
                    for d in candidates
                    if provides(d, key)
                    and d.signature != consumer.signature
                    and not d.skip_reason(None)
                ),
                None,
            )
            if match is not None and match not in pulled:
                pulled.append(match)
                consumers.append(match)
    return pulled


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
        for wanted in needed(consumer):
            for j, provider in enumerate(cases):
                if provider.signature != consumer.signature and wanted in given(provider):
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
    other shard below where it stood. LPT alone can be 4/3 - 1/(3N) of optimal (Graham 1969),
    and on the GPU tier's units it misses the goal of 1.1x the bound at N=4 that this meets
    (bench/shard_makespan.py; figures in docs/measurements.md). Each step lowers the sorted
    loads lexicographically, so it ends."""
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
