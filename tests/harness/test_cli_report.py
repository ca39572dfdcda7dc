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
