"""Validation table (one row per result) and A/B comparison table (one row per test_id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.report.schema import FAILING_OUTCOMES
from harness.report.table_format import render_table

VALIDATION_HEADERS = ("test", "launcher", "tier", "result", "cause", "time to ready", "duration")
COMPARE_HEADERS = (
    "test",
    "result A",
    "result B",
    "cause A",
    "cause B",
    "ready A",
    "ready B",
    "delta",
)
ABSENT = "—"


def format_seconds(seconds: float | None) -> str:
    """``12.34 -> "12.3 s"``; None -> "—"."""
    return ABSENT if seconds is None else f"{seconds:.1f} s"


def validation_table(results: Sequence[dict[str, Any]], fmt: str = "md") -> str:
    """Columns: test, launcher, tier, result, cause, time to ready, duration (file order)."""
    rows = [
        [
            result["test_id"],
            result["launcher"],
            result["tier"],
            result["outcome"],
            result["cause"] or "",
            format_seconds(result["ready_s"]),
            format_seconds(result["duration_s"]),
        ]
        for result in results
    ]
    return render_table(VALIDATION_HEADERS, rows, fmt, row_classes=[r["outcome"] for r in results])


def outcome_change(outcome_a: str, outcome_b: str) -> str:
    """ "" when equal; "fixed" when B passes and A failed; "regressed" the other way;
    otherwise "changed"."""
    if outcome_a == outcome_b:
        return ""
    if outcome_a in FAILING_OUTCOMES and outcome_b == "passed":
        return "fixed"
    if outcome_a == "passed" and outcome_b in FAILING_OUTCOMES:
        return "regressed"
    return "changed"


def describe_delta(result_a: dict[str, Any], result_b: dict[str, Any]) -> str:
    """Outcome change and B-A time to ready, e.g. "regressed; ready +3.2 s" or "ready -0.4 s"."""
    parts = [outcome_change(result_a["outcome"], result_b["outcome"])]
    ready_a, ready_b = result_a["ready_s"], result_b["ready_s"]
    if ready_a is not None and ready_b is not None:
        parts.append(f"ready {ready_b - ready_a:+.1f} s")
    return "; ".join(part for part in parts if part) or "same"


def _by_test_id(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Last result per test_id (a rerun in the same file replaces the earlier one)."""
    return {result["test_id"]: result for result in results}


def _side_cells(result: dict[str, Any] | None) -> tuple[str, str, str]:
    if result is None:
        return ABSENT, ABSENT, ABSENT
    return result["outcome"], result["cause"] or "", format_seconds(result["ready_s"])


def compare_table(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], fmt: str = "md") -> str:
    """A/B rows by test_id: A's order first, then tests only in B. Tests on one side only say
    "only in A" / "only in B" in the delta column."""
    results_a, results_b = _by_test_id(a), _by_test_id(b)
    test_ids = list(results_a) + [test_id for test_id in results_b if test_id not in results_a]
    rows = []
    row_classes = []
    for test_id in test_ids:
        result_a, result_b = results_a.get(test_id), results_b.get(test_id)
        outcome_a, cause_a, ready_a = _side_cells(result_a)
        outcome_b, cause_b, ready_b = _side_cells(result_b)
        if result_a is None:
            delta, row_class = "only in B", "only-in-b"
        elif result_b is None:
            delta, row_class = "only in A", "only-in-a"
        else:
            delta = describe_delta(result_a, result_b)
            row_class = outcome_change(result_a["outcome"], result_b["outcome"]) or "same"
        rows.append([test_id, outcome_a, outcome_b, cause_a, cause_b, ready_a, ready_b, delta])
        row_classes.append(row_class)
    return render_table(COMPARE_HEADERS, rows, fmt, row_classes=row_classes)
