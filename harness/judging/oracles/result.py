"""The verdict of one oracle: passed or not, and a detail line a person can act on."""

from __future__ import annotations

from dataclasses import dataclass

EXCERPT_CHARS = 160


@dataclass(frozen=True)
class OracleResult:
    """``passed`` and a one-line ``detail`` saying what was found or missing."""

    passed: bool
    detail: str


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters, e.g. ``'The square is gr…'``."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit] + "…")
