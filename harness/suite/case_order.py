"""In which order serve cases run. Cases of one launch signature always stay together.

CPU tier: baselines first (agg, then e_pd, then epd), plain launches before flagged ones, so the
cross-topology checks find their baseline in the same session.
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

from harness.profiles import TOPOLOGY_ORDER
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


def topology_rank(sc: ServeCase) -> int:
    topo = sc.profile.topology
    return TOPOLOGY_ORDER.index(topo) if topo in TOPOLOGY_ORDER else len(TOPOLOGY_ORDER)


def order_key(
    cases: Sequence[ServeCase], durations: dict[str, float]
) -> Callable[[ServeCase], tuple[Any, ...]]:
    """A sort key for these cases (signature groups never split)."""
    rank: dict[str, int] = {}
    group_s: dict[str, float] = defaultdict(float)
    for sc in cases:
        sig = sc.signature or ""
        rank[sig] = min(rank.get(sig, 99), topology_rank(sc))
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
