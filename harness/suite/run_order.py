"""Orders of test ids (xdist-scheduler style strategies): keep file order, or longest first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


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
