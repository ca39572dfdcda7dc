"""The end of a role's log worth reading: colour codes stripped, the harness's own health-poll 503
lines folded into one note (`tail`)."""

from __future__ import annotations

import re
from pathlib import Path

LOG_TAIL_LINES = 30

LOG_SCAN_BYTES = 256_000  # of each role's log read for its last traceback

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# A worker's system port logs an ERROR for every 503 it answers, i.e. for each of the harness's
# own /health polls while it starts: dozens of lines that would push the real cause out of a tail.
HEALTH_POLL_503 = re.compile(r"tower_http::trace::on_failure.*Status code: 503")


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines worth reading: colour codes stripped, the health-poll 503 lines
    folded into one note."""
    try:
        data = path.read_bytes()[-64_000:]
    except FileNotFoundError:
        return f"(no log at {path})"
    text = ANSI_ESCAPE.sub("", data.decode(errors="replace"))
    return "\n".join(fold_health_polls(text.splitlines())[-lines:])


def fold_health_polls(lines: list[str]) -> list[str]:
    """Drop the health-poll 503 lines; one note, where the last of them was, says how many."""
    kept: list[str] = []
    dropped, note_at = 0, 0
    for line in lines:
        if HEALTH_POLL_503.search(line):
            dropped, note_at = dropped + 1, len(kept)
        else:
            kept.append(line)
    if not dropped:
        return lines
    note = f"[{dropped} x '503 Service Unavailable' lines from the harness's /health polls, elided]"
    return [*kept[:note_at], note, *kept[note_at:]]
