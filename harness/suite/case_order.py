"""In which order serve cases run. Cases of one launch signature always stay together.

CPU tier: baselines first, plain launches before flagged ones, so the cross-topology checks find
their baseline in the same session. The order follows the profiles' `same_as` data, not topology
names: a topology whose cases are judged against another's runs after it (agg, then e_pd, p_d,
agg_router, then epd, which is judged against e_pd).
GPU tier: the longest launch groups first (LPT, from a previous run's results.jsonl), which keeps
the makespan of a parallel run close to its lower bound (bench/gpu_makespan.py). The orders are
small strategies (xdist-scheduler style): `FileOrder`, `LongestFirst`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.suite.serve_case import ServeCase


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
            below = [depth((stack, model, t), seen | {topology}) for t in wants.get(key, ())
                     if t not in seen]  # fmt: skip
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
