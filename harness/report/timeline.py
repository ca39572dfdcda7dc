"""Swim-lane SVG of a result's health timeline: one lane per role, coloured by health state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

STATE_COLOURS = {
    "starting": "#9ecae1",
    "notready": "#fdae6b",
    "no_health_source": "#756bb1",  # every endpoint ready, status notready: the seed bug
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
    magnitude = 10 ** math.floor(math.log10(raw))
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
