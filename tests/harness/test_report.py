import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from xml.etree import ElementTree

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.result_record import result_record
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import load_profile
from harness.report import (
    ResultsFileError,
    compare_table,
    html_report,
    junit_properties,
    load_results,
    timeline_svg,
    validation_table,
)
from harness.topology.topology import Topology

AGG = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)
TIMELINE = [
    {"role": "frontend", "t": 0.0, "state": "starting"},
    {"role": "decode", "t": 0.5, "state": "starting"},
    {"role": "decode", "t": 30.0, "state": "notready"},
    {"role": "frontend", "t": 20.0, "state": "ready"},
    {"role": "decode", "t": 41.25, "state": "ready"},
    {"role": "decode", "t": 60.0, "state": "exited"},
]


def make_result(
    test_id: str,
    outcome: str = "passed",
    cause: Cause = Cause.WRONG_ANSWER,
    **overrides: Any,
) -> dict[str, Any]:
    """A record as the results writer (harness/cases/result_record.py) writes it for a case on a
    topology ready in 41.25 s; `test_id` and `overrides` replace its fields afterwards."""
    failing = outcome != "passed"
    topo = SimpleNamespace(
        ready_s=41.25,
        peak_rss_mib=1900.0,
        phase_times={"workers_healthy": 39.75},
        timeline=SimpleNamespace(events=TIMELINE),
        plan=SimpleNamespace(run_dir=Path("/runs/x")),
    )
    report = SimpleNamespace(
        outcome="passed" if outcome == "error" else outcome,
        when="call",
        duration=63.0,
        skipped=False,
        longrepr=None,
    )
    failure = TopologyFailure(cause, "missing all-of word 'green'") if failing else None
    # the topology stand-in carries only what result_record reads of one
    record = CaseRecord(topology=cast(Topology[Any], topo), report=report, failure=failure)
    if outcome == "error":
        record.teardown_failure = failure
    result = result_record(ServeCase(AGG, AGG.cases[0], "cpu"), record)
    return {**result, "test_id": test_id, **overrides}


def write_jsonl(path: Path, results: list[Any]) -> Path:
    path.write_text("".join(json.dumps(result) + "\n" for result in results))
    return path


@pytest.fixture
def run_a(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "a.jsonl",
        [
            make_result("mm_agg_qwen"),
            make_result("mm_epd_qwen", ready_s=50.0),
            make_result("mm_old_only"),
        ],
    )


@pytest.fixture
def run_b(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "b.jsonl",
        [
            make_result("mm_agg_qwen", "failed", cause=Cause.PHASE_TIMEOUT),
            make_result("mm_epd_qwen", ready_s=47.5),
            make_result("mm_<new>", "error", cause=Cause.LAUNCHER_INVALID, ready_s=None),
        ],
    )


def test_load_results_reads_valid_lines_and_skips_blank(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(make_result("x")) + "\n\n" + json.dumps(make_result("y")) + "\n")
    assert [result["test_id"] for result in load_results(path)] == ["x", "y"]


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("{not json", r":2: not valid JSON"),
        (
            json.dumps(make_result("x", tier="tpu")),
            r":2: field 'tier': Input should be 'cpu' or 'gpu', got 'tpu'",
        ),
        (
            json.dumps({k: v for k, v in make_result("x").items() if k != "model"}),
            r":2: field 'model': missing",
        ),
        (json.dumps(make_result("x", ready_s="41")), r":2: field 'ready_s'"),
        (json.dumps(make_result("x", duration_s=True)), r":2: field 'duration_s'"),
        (json.dumps(make_result("x", started_at="yesterday")), r":2: field 'started_at'"),
        (
            json.dumps(make_result("x", timeline=[{"role": "a", "t": "0", "state": "ready"}])),
            r":2: field 'timeline.0.t'",
        ),
        (json.dumps(make_result("x", phases={"launch": -1})), r":2: field 'phases.launch'"),
        (json.dumps([1, 2]), r":2: expected a JSON object, got list"),
    ],
    # named, not the line itself: a line holds the time it was made (xdist workers must agree)
    ids=[
        "not_json",
        "tier",
        "model",
        "ready_s",
        "duration_s",
        "started_at",
        "timeline",
        "phases",
        "list",
    ],
)
def test_bad_line_error_names_file_line_and_field(
    tmp_path: Path, bad_line: str, expected: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(make_result("ok")) + "\n" + bad_line + "\n")
    with pytest.raises(ResultsFileError, match=re.escape(str(path)) + expected.replace("|", r"\|")):
        load_results(path)


def test_validation_table_markdown(run_a: Path, run_b: Path) -> None:
    table = validation_table(load_results(run_b), fmt="md")
    lines = table.splitlines()
    assert lines[0] == "| test | launcher | tier | result | cause | time to ready | duration |"
    assert len(lines) == 2 + 3
    launcher = "launchers/vllm/agg_multimodal.sh"
    assert (
        lines[2] == f"| mm_agg_qwen | {launcher} | cpu | failed | phase_timeout | 41.2 s | 63.0 s |"
    )
    assert f"| mm_<new> | {launcher} | cpu | error | launcher_invalid | — | 63.0 s |" in lines


def test_validation_table_html_escapes(run_b: Path) -> None:
    table = validation_table(load_results(run_b), fmt="html")
    assert "<th>time to ready</th>" in table
    assert '<tr class="failed"><td>mm_agg_qwen</td>' in table
    assert "mm_&lt;new&gt;" in table
    assert "mm_<new>" not in table
    ElementTree.fromstring(table)  # well-formed markup


def test_unknown_format_is_rejected(run_a: Path) -> None:
    with pytest.raises(ValueError, match="'csv'"):
        validation_table(load_results(run_a), fmt="csv")


def test_compare_table_rows_by_test_id(run_a: Path, run_b: Path) -> None:
    table = compare_table(load_results(run_a), load_results(run_b), fmt="md")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:]}
    assert list(rows) == ["mm_agg_qwen", "mm_epd_qwen", "mm_old_only", "mm_<new>"]
    assert rows["mm_agg_qwen"].endswith("| regressed; ready +0.0 s |")
    assert "| passed | failed |" in rows["mm_agg_qwen"]
    assert rows["mm_epd_qwen"].endswith("| 50.0 s | 47.5 s | ready -2.5 s |")
    assert rows["mm_old_only"].endswith("| only in A |")
    assert "| passed | — |" in rows["mm_old_only"]
    assert rows["mm_<new>"].endswith("| only in B |")
    assert "| — | error |" in rows["mm_<new>"]


def test_compare_table_html_classes(run_a: Path, run_b: Path) -> None:
    table = compare_table(load_results(run_a), load_results(run_b), fmt="html")
    assert '<tr class="regressed"><td>mm_agg_qwen</td>' in table
    assert '<tr class="only-in-b"><td>mm_&lt;new&gt;</td>' in table
    ElementTree.fromstring(table)


def test_timeline_svg_has_each_role_lane_and_legend() -> None:
    result = make_result("mm_<epd>", "failed")
    svg = timeline_svg(result)
    root = ElementTree.fromstring(svg)
    texts = [element.text for element in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "frontend" in texts and "decode" in texts
    for state in ("starting", "notready", "ready", "exited", "unknown"):
        assert state in texts
    assert "mm_<epd>" in texts  # escaped in the source, intact once parsed
    titles = [element.text for element in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "decode: notready from 30.0 s to 41.2 s" in titles
    assert "decode: exited from 60.0 s to 63.0 s" in titles
    assert "ready at 41.2 s" in titles


def test_timeline_svg_without_entries() -> None:
    svg = timeline_svg(make_result("x", timeline=[]))
    assert "no timeline recorded" in svg
    ElementTree.fromstring(svg)


def test_html_report_embeds_timelines_for_failing_results_only(run_a: Path, run_b: Path) -> None:
    page = html_report(load_results(run_b), baseline=load_results(run_a))
    assert page.count("<svg") == 2  # mm_agg_qwen failed, mm_<new> error
    assert "mm_epd_qwen</text>" not in page
    assert "A/B" in page
    assert "missing all-of word &#x27;green&#x27;" in page


def test_junit_properties() -> None:
    properties = junit_properties(make_result("x", "failed"))
    assert ("tier", "cpu") in properties
    assert ("outcome", "failed") in properties
    assert ("cause", "wrong_answer") in properties
    assert ("ready_s", "41.250") in properties
    assert ("phase.workers_healthy", "39.750") in properties
    assert all(isinstance(name, str) and isinstance(value, str) for name, value in properties)
    passed = dict(junit_properties(make_result("y", ready_s=None)))
    assert "cause" not in passed and "ready_s" not in passed


def test_the_writer_writes_exactly_the_one_schema() -> None:
    """result_record's fields are harness/core/result_schema.py's, no more, no fewer; the reader
    checks that schema's required ones (docs/reference/results-schema.md is generated from it)."""
    from harness.core.result_schema import ResultLine

    assert list(make_result("mm_agg_qwen")) == list(ResultLine.model_fields)


def test_the_writer_refuses_a_line_the_reader_would() -> None:
    """One type for both sides: a record the schema refuses is never written."""
    with pytest.raises(ValueError, match="outcome"):
        make_result("x", outcome="ok")


def test_a_retried_launch_is_named_in_the_table_and_in_junit() -> None:
    why = "start 1 failed role_exited (...): a known transient start-up failure (...)"
    result = make_result("mm_agg_qwen", retries=[why])
    assert "| passed (started 2 times) |" in validation_table([result])
    assert ("retry.1", why) in junit_properties(result)
    assert "started" not in validation_table([make_result("mm_agg_qwen")])
