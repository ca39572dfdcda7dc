"""`python -m harness report`: tables from results.jsonl files, errors that name file:line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.__main__ import main
from tests.harness.test_report import make_result


def write(path: Path, results: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in results))
    return path


def test_markdown_validation_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write(tmp_path / "r.jsonl", [make_result("mm_agg_qwen3-vl-2b")])
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Serve validation")
    assert "| mm_agg_qwen3-vl-2b |" in out and "A/B" not in out


def test_compare_to_html_file(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [make_result("t1"), make_result("t2")])
    b = write(tmp_path / "b.jsonl", [make_result("t1", "failed"), make_result("t3")])
    out = tmp_path / "out" / "report.html"
    assert main(["report", str(b), "--compare", str(a), "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "A/B" in page
    assert "only in A" in page and "only in B" in page


def test_bad_line_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(make_result("t1")) + "\n" + json.dumps({**make_result("t2"), "outcome": "ok"})
    )
    assert main(["report", str(bad)]) == 2
    assert f"{bad}:2: field 'outcome'" in capsys.readouterr().err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "none.jsonl")]) == 2
    assert "no results file at" in capsys.readouterr().err


def test_a_file_two_runs_appended_to_reports_each_ids_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tutorial's command on its second day: the suite appends each run to one file; the
    report is the latest result of each id, naming the runs; --all shows both runs."""
    first = [make_result(t, session="run1", started_at="2026-12-05T10:00:00") for t in ("a", "b")]
    second = [
        make_result("a", "failed", session="run2", started_at="2026-12-06T09:00:00"),
        make_result("c", session="run2", started_at="2026-12-06T09:01:00"),
    ]
    results = write(tmp_path / "results.jsonl", [*first, *second])
    assert main(["report", str(results)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split(" | ")[0].removeprefix("| ") for r in rows[1:]] == ["b", "a", "c"], out
    assert next(r for r in rows if r.startswith("| a |")).count("failed") == 1  # run2's
    assert "From 2 run(s): run1 (1 id(s), 2026-12-05T10:00), run2 (2 id(s), 2026-12-06T09:00)" in (
        out
    )
    assert main(["report", str(results), "--all"]) == 0
    assert capsys.readouterr().out.count("| a |") == 2


def test_shards_that_overlap_say_so_in_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [f"mm_case_{i}" for i in range(40)]
    one = write(tmp_path / "one.jsonl", [make_result(t) for t in ids])
    two = write(tmp_path / "two.jsonl", [make_result(t) for t in ids])
    assert main(["report", str(one), str(two)]) == 2
    err = capsys.readouterr().err.strip()
    assert "40 id(s) in more than one file (mm_case_0, mm_case_1, mm_case_2, …)" in err
    assert len(err) < 200, err
