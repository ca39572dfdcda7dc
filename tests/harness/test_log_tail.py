"""Log tails in failure evidence: colour codes stripped, the harness's own /health-poll 503 lines
folded into one note so the lines that explain a failure stay in view. Lines as Dynamo 1.6.1
writes them."""

from __future__ import annotations

from pathlib import Path

from harness.topology.roles import tail

POLL = (
    "\x1b[2m2026-11-29T21:34:07.229612Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2mtower_http::trace::"
    "on_failure\x1b[0m\x1b[2m:\x1b[0m response failed \x1b[3mclassification\x1b[0m\x1b[2m=\x1b[0m"
    "Status code: 503 Service Unavailable \x1b[3mlatency\x1b[0m\x1b[2m=\x1b[0m0 ms"
)
OTHER_503 = "frontend: upstream answered Status code: 503 Service Unavailable"


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    log = tmp_path / "encode.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_polls_fold_into_one_note_and_colour_is_stripped(tmp_path: Path) -> None:
    lines = ["start", POLL, "loading", *[POLL] * 40, "\x1b[31mERROR\x1b[0m real cause", "end"]
    log = write_log(tmp_path, lines)
    assert tail(log, 30).splitlines() == [
        "start",
        "loading",
        "[41 x '503 Service Unavailable' lines from the harness's /health polls, elided]",
        "ERROR real cause",
        "end",
    ]
    assert tail(log, 2).splitlines() == ["ERROR real cause", "end"]


def test_a_log_without_polls_is_only_uncoloured(tmp_path: Path) -> None:
    log = write_log(tmp_path, ["a", OTHER_503, "\x1b[1mb\x1b[0m"])
    assert tail(log).splitlines() == ["a", OTHER_503, "b"]


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    assert tail(tmp_path / "nope.log") == f"(no log at {tmp_path / 'nope.log'})"
