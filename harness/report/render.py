"""Serve results rendered for people and CI: tables, an HTML page, JUnit XML and timeline SVGs.

- `render_table`: a header row and text cells as a Markdown or HTML table, escaped for each;
  `validation_table` (one row per result) and `compare_table`, the A/B comparison (one row per
  test_id).
- `html_report`: a self-contained HTML report page: the validation table, an optional A/B
  table, and a timeline SVG for each failing result.
- `junit_properties`, `junit_xml`: JUnit for serve results: ``<property>`` pairs describing one
  result, and a whole JUnit XML file of a (merged) run, one ``<testcase>`` per result.
- `timeline_svg`: swim-lane SVG of a result's health timeline: one lane per role, coloured by
  health state."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from xml.etree import ElementTree

from harness.report.results import FAILING_OUTCOMES

TABLE_FORMATS = ("md", "html")
_WHITESPACE = re.compile(r"\s+")


def check_format(fmt: str) -> None:
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"table format {fmt!r} is not one of {', '.join(TABLE_FORMATS)}")


def markdown_cell(text: str) -> str:
    """One-line Markdown cell: whitespace runs collapsed, ``|`` and backslash escaped."""
    one_line = _WHITESPACE.sub(" ", text).strip()
    return one_line.replace("\\", "\\\\").replace("|", "\\|")


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    fmt: str,
    row_classes: Sequence[str] | None = None,
) -> str:
    """Table text; ``row_classes`` (HTML only) sets a CSS class per row, e.g. "failed"."""
    check_format(fmt)
    if fmt == "md":
        lines = [
            "| " + " | ".join(markdown_cell(header) for header in headers) + " |",
            "|" + "|".join("---" for _ in headers) + "|",
        ]
        lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    head = "".join(f"<th>{html.escape(header)}</th>" for header in headers)
    body_rows = []
    for index, row in enumerate(rows):
        css_class = row_classes[index] if row_classes else ""
        class_attribute = f' class="{html.escape(css_class)}"' if css_class else ""
        cells = "".join(f"<td>{html.escape(cell)}</td>" for cell in row)
        body_rows.append(f"<tr{class_attribute}>{cells}</tr>")
    body = "\n".join(body_rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"


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
            result["outcome"] + retried(result),
            result["cause"] or "",
            format_seconds(result["ready_s"]),
            format_seconds(result["duration_s"]),
        ]
        for result in results
    ]
    return render_table(VALIDATION_HEADERS, rows, fmt, row_classes=[r["outcome"] for r in results])


def retried(result: dict[str, Any]) -> str:
    """' (started 2 times)' where the launch was started again after a known transient start-up
    failure (harness/topology/transient.py); '' otherwise."""
    retries = len(result.get("retries") or [])
    return f" (started {retries + 1} times)" if retries else ""


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


DESCRIPTIVE_FIELDS = ("profile", "case", "tier", "stack", "launcher", "model", "outcome")


def junit_properties(result: dict[str, Any]) -> list[tuple[str, str]]:
    """E.g. ``[("profile", "agg_qwen3-vl-2b"), ..., ("ready_s", "41.200"),
    ("phase.readiness", "38.000")]``; cause and ready_s appear only when set."""
    properties = [(field, str(result[field])) for field in DESCRIPTIVE_FIELDS]
    if result.get("cause") is not None:
        properties.append(("cause", str(result["cause"])))
    if result.get("ready_s") is not None:
        properties.append(("ready_s", f"{float(result['ready_s']):.3f}"))
    properties.append(("duration_s", f"{float(result['duration_s']):.3f}"))
    properties += [(f"retry.{k}", why) for k, why in enumerate(result.get("retries") or [], 1)]
    properties.append(("started_at", str(result["started_at"])))
    properties += [
        (f"phase.{name}", f"{float(seconds):.3f}")
        for name, seconds in (result.get("phases") or {}).items()
    ]
    return properties


def junit_xml(results: list[dict[str, Any]], name: str = "serve") -> str:
    """A JUnit XML document: each result a testcase (classname = profile) with its properties;
    failed -> <failure>, error -> <error>, skipped -> <skipped>, carrying cause and message."""
    suite = ElementTree.Element("testsuite", name=name, tests=str(len(results)))
    counts = {"failed": 0, "error": 0, "skipped": 0}
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=str(result["profile"]),
            name=str(result["test_id"]),
            time=f"{float(result['duration_s']):.3f}",
        )
        properties = ElementTree.SubElement(case, "properties")
        for key, value in junit_properties(result):
            ElementTree.SubElement(properties, "property", name=key, value=value)
        outcome = result["outcome"]
        if outcome in counts:
            counts[outcome] += 1
            tag = {"failed": "failure", "error": "error", "skipped": "skipped"}[outcome]
            detail = ElementTree.SubElement(case, tag, message=str(result.get("message") or ""))
            detail.set("type", str(result.get("cause") or outcome))
    suite.set("failures", str(counts["failed"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


STATE_COLOURS = {
    "starting": "#9ecae1",
    "notready": "#fdae6b",
    "no_health_source": "#756bb1",  # every endpoint ready, status notready
    "ready": "#74c476",
    "exited": "#de2d26",
    "unknown": "#bdbdbd",
}
# The harness's probe says "down" while a role's port does not answer yet.
STATE_ALIASES = {"down": "starting"}
LABEL_WIDTH = 130
PLOT_WIDTH = 560
LANE_HEIGHT = 22
LANE_GAP = 6
TOP_MARGIN = 28
AXIS_HEIGHT = 24
LEGEND_HEIGHT = 22


def state_colour(state: str) -> str:
    """Colour of a health state; states not listed are drawn as "unknown"."""
    state = STATE_ALIASES.get(state, state)
    return STATE_COLOURS.get(state, STATE_COLOURS["unknown"])


def _tick_step(span: float) -> float:
    """A 1/2/5 x 10^n step giving about 5-10 ticks over ``span`` seconds."""
    raw = span / 6
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= raw:
            return factor * magnitude
    return 10 * magnitude


def _lanes(timeline: list[dict[str, Any]]) -> dict[str, list[tuple[float, str]]]:
    """Role -> time-sorted (t, state) changes, roles in order of first appearance."""
    lanes: dict[str, list[tuple[float, str]]] = {}
    for entry in timeline:
        lanes.setdefault(entry["role"], []).append((float(entry["t"]), entry["state"]))
    return {role: sorted(changes, key=lambda change: change[0]) for role, changes in lanes.items()}


@dataclass(frozen=True)
class Frame:
    """Where a timeline's seconds land on the plot."""

    start: float
    end: float
    top: float
    bottom: float

    def x_of(self, t: float) -> float:
        span = self.end - self.start if self.end > self.start else 1.0
        return LABEL_WIDTH + (t - self.start) / span * PLOT_WIDTH


def timeline_svg(result: dict[str, Any]) -> str:
    """SVG of ``result["timeline"]``: each ``{role, t, state}`` entry starts a segment that lasts
    until that role's next entry, or to the end of the run (the latest of duration_s and the
    last t). A dashed line marks ready_s; a legend names the state colours.

    Example entry list: ``[{"role": "frontend", "t": 0.0, "state": "starting"},
    {"role": "frontend", "t": 4.2, "state": "ready"}]``.
    """
    lanes = _lanes(result.get("timeline") or [])
    times = [t for changes in lanes.values() for t, _ in changes]
    start = min([0.0, *times])
    end = max([result.get("duration_s") or 0.0, result.get("ready_s") or 0.0, *times])
    top = TOP_MARGIN
    frame = Frame(start, end, top, top + max(len(lanes), 1) * (LANE_HEIGHT + LANE_GAP))
    width = LABEL_WIDTH + PLOT_WIDTH + 20
    height = frame.bottom + AXIS_HEIGHT + LEGEND_HEIGHT + 8
    title = escape(str(result.get("test_id", "")))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11" role="img" aria-label="timeline {title}">',
        f'<text x="4" y="16" font-weight="bold">{title}</text>',
    ]
    if not lanes:
        parts.append(f'<text x="{LABEL_WIDTH}" y="{top + 15}">no timeline recorded</text>')
    parts += _lane_parts(lanes, frame)
    parts += _axis_parts(frame, result.get("ready_s"))
    parts += _legend_parts(frame.bottom + AXIS_HEIGHT + 6)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _lane_parts(lanes: dict[str, list[tuple[float, str]]], frame: Frame) -> list[str]:
    parts = []
    for lane_index, (role, changes) in enumerate(lanes.items()):
        y = frame.top + lane_index * (LANE_HEIGHT + LANE_GAP)
        parts.append(f'<text x="4" y="{y + 15}">{escape(role)}</text>')
        for change_index, (t, state) in enumerate(changes):
            t_next = changes[change_index + 1][0] if change_index + 1 < len(changes) else frame.end
            x, x_next = frame.x_of(t), frame.x_of(t_next)
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(x_next - x, 0.5):.1f}" '
                f'height="{LANE_HEIGHT}" fill="{state_colour(state)}">'
                f"<title>{escape(role)}: {escape(state)} from {t:.1f} s to {t_next:.1f} s"
                "</title></rect>"
            )
    return parts


def _axis_parts(frame: Frame, ready_s: float | None) -> list[str]:
    parts = []
    span = frame.end - frame.start if frame.end > frame.start else 1.0
    step = _tick_step(span)
    tick = math.ceil(frame.start / step) * step
    while tick <= frame.end + 1e-9:
        x = frame.x_of(tick)
        parts.append(
            f'<line x1="{x:.1f}" y1="{frame.bottom}" x2="{x:.1f}" y2="{frame.bottom + 4}" '
            'stroke="#333"/>'
            f'<text x="{x:.1f}" y="{frame.bottom + 16}" text-anchor="middle">{tick:g} s</text>'
        )
        tick += step
    if ready_s is not None:
        x = frame.x_of(float(ready_s))
        parts.append(
            f'<line x1="{x:.1f}" y1="{frame.top - 4}" x2="{x:.1f}" y2="{frame.bottom}" '
            'stroke="#000" stroke-dasharray="4 3"><title>ready at '
            f"{float(ready_s):.1f} s</title></line>"
        )
    return parts


def _legend_parts(y: float) -> list[str]:
    parts, x = [], LABEL_WIDTH
    for state, colour in STATE_COLOURS.items():
        parts.append(
            f'<rect x="{x}" y="{y}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16}" y="{y + 10}">{state}</text>'
        )
        x += 28 + 7 * len(state)
    return parts
