"""The verdict of one oracle: passed or not, and a detail line a person can act on."""

from __future__ import annotations

from dataclasses import dataclass

EXCERPT_CHARS = 160


@dataclass(frozen=True)
class OracleResult:
    """``passed`` and a one-line ``detail`` saying what was found or missing. ``vouches``: False
    for a pass that compared nothing (no reference computable for this request), so it does not
    count as an oracle that read the content."""

    passed: bool
    detail: str
    vouches: bool = True


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``repr`` of ``text`` cut to ``limit`` characters, e.g. ``'The square is gr…'``."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit] + "…")
