"""A self-contained HTML report page: the validation table, an optional A/B table, and a
timeline SVG for each failing result."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from harness.report.schema import FAILING_OUTCOMES
from harness.report.tables import compare_table, validation_table
from harness.report.timeline import timeline_svg

PAGE_STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
tr.failed td, tr.error td, tr.regressed td { background: #fde0dd; }
tr.passed td, tr.fixed td { background: #e5f5e0; }
pre { background: #f4f4f4; padding: 6px; white-space: pre-wrap; }
"""


def html_report(
    results: Sequence[dict[str, Any]],
    title: str = "Serve validation",
    baseline: Sequence[dict[str, Any]] | None = None,
) -> str:
    """Whole HTML document; ``baseline`` (the A side) adds an A/B table against ``results``."""
    sections = [f"<h1>{escape(title)}</h1>", validation_table(results, fmt="html")]
    if baseline is not None:
        sections += ["<h2>A/B (A = baseline, B = this run)</h2>"]
        sections.append(compare_table(baseline, results, fmt="html"))
    failing = [result for result in results if result["outcome"] in FAILING_OUTCOMES]
    for result in failing:
        cause = f" ({result['cause']})" if result["cause"] else ""
        sections += [
            f"<h2>{escape(result['test_id'])}: {escape(result['outcome'] + cause)}</h2>",
            f"<pre>{escape(result['message'])}</pre>",
            timeline_svg(result),
        ]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{PAGE_STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
