"""Progress lines: written at once through the terminal reporter, nothing under -q, and under
xdist relayed through each case's report and written once by the controller."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from harness.cases.progress_lines import PROPERTY
from harness.plugin.progress import Progress, write_relayed


class FakeReporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def ensure_newline(self) -> None:
        pass

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def config(verbosity: int = 0, worker: bool = False) -> Any:
    reporter = FakeReporter()
    plugins = SimpleNamespace(
        get_plugin=lambda name: reporter if name == "terminalreporter" else None
    )
    cfg = SimpleNamespace(
        pluginmanager=plugins, get_verbosity=lambda: verbosity, stash=pytest.Stash()
    )
    if worker:
        cfg.workerinput = {}
    return cfg, reporter


def test_lines_are_written_at_once_and_not_under_quiet() -> None:
    cfg, reporter = config()
    Progress(cfg).say("launching epd")
    assert reporter.lines == ["[serve] launching epd"]
    quiet_cfg, quiet = config(verbosity=-1)
    Progress(quiet_cfg).say("launching epd")
    assert quiet.lines == []


def test_a_worker_relays_and_the_controller_writes_each_line_once() -> None:
    worker_cfg, worker_out = config(worker=True)
    progress = Progress(worker_cfg)
    item = SimpleNamespace(user_properties=[])
    progress.say("launching epd")
    progress.relay_into(cast(pytest.Item, item))
    progress.say("epd ready in 20.0 s")
    progress.relay_into(cast(pytest.Item, item))
    assert worker_out.lines == []
    controller_cfg, out = config()
    for _phase in ("setup", "call"):  # properties accumulate over a case's reports
        report = SimpleNamespace(nodeid="t[x]", user_properties=list(item.user_properties))
        write_relayed(controller_cfg, cast(pytest.TestReport, report))
    assert out.lines == ["[serve] launching epd", "[serve] epd ready in 20.0 s"]
    assert [n for n, _ in item.user_properties] == [PROPERTY, PROPERTY]


def test_a_serve_case_reads_as_one_log_line_not_a_letter() -> None:
    """pytest's letter and file path are left out for serve cases (their progress line says the
    outcome), with the same summary category; other tests and -v keep pytest's own."""
    from harness.plugin.reporting import SERVE_NODEIDS, pytest_report_teststatus

    cfg, _ = config()
    cfg.stash[SERVE_NODEIDS] = {"tests/serve/test_serve.py::test_serve[x]"}

    def status(nodeid: str, when: str, outcome: str, cfg: Any = cfg) -> Any:
        report = SimpleNamespace(
            nodeid=nodeid,
            when=when,
            outcome=outcome,
            failed=outcome == "failed",
            skipped=outcome == "skipped",
        )
        return pytest_report_teststatus(cast(pytest.TestReport, report), cfg)

    serve = "tests/serve/test_serve.py::test_serve[x]"
    assert status(serve, "setup", "passed") == ("", "", "")
    assert status(serve, "call", "passed") == ("passed", "", "")
    assert status(serve, "call", "failed") == ("failed", "", "")
    assert status(serve, "setup", "skipped") == ("skipped", "", "")
    assert status(serve, "setup", "failed") == ("error", "", "")
    assert status("tests/harness/test_x.py::test_y", "call", "passed") is None
    verbose, _ = config(verbosity=1)
    verbose.stash[SERVE_NODEIDS] = {serve}
    assert status(serve, "call", "passed", verbose) is None


def test_case_lines_are_numbered_with_an_eta_from_recorded_durations() -> None:
    from harness.cases.progress_lines import ProgressCount, case_line

    count = ProgressCount(["a", "b", "c"], {"b": 60.0})  # c: no record, the run's mean
    first = count.number(case_line("a", "passed", None, 30.0))
    assert first == "[1/3] a: passed, 30.0 s; ETA 1 min 30 s"  # b 60 s + c 30 s (mean)
    second = count.number(case_line("c", "skipped", "GPU tier only: why", 0.0))
    assert second == "[2/3] c: skipped (GPU tier only: why), 0.0 s; ETA 1 min 00 s"
    assert count.number(case_line("b", "failed", "wrong_answer", 61.0)) == (
        "[3/3] b: failed (wrong_answer), 61.0 s"
    )
    assert count.number("launching x") == "launching x"  # other lines as they are
    assert ProgressCount([], {}).number(case_line("a", "passed", None, 1.0)) == "a: passed, 1.0 s"


def test_the_run_ends_with_what_it_skipped_retried_and_the_defects_it_excused() -> None:
    import json

    from harness.plugin.reporting import OUTCOME, RunSummary, summary_entry

    checks = ["logprobs: upstream defect encoder-dtype holds: gap 4.5e-03 within 4.53e-03"]
    retry = "start 1 failed role_exited (...): a known transient start-up failure (...)"
    passed = {
        "test_id": "mm_epd_qwen3-vl-2b",
        "outcome": "passed",
        "checks": checks,
        "retries": [retry],
    }
    skipped = {"test_id": "video_e_pd_qwen", "outcome": "skipped", "checks": [], "retries": []}
    summary = RunSummary()
    for result, why in ((passed, None), (skipped, "GPU tier only: NVDEC")):
        report = SimpleNamespace(
            user_properties=[(OUTCOME, json.dumps(summary_entry(result, why)))]
        )
        summary.pytest_runtest_logreport(cast(pytest.TestReport, report))
    assert summary.lines() == [
        "serve-harness skipped 1 case(s):",
        "  video_e_pd_qwen: GPU tier only: NVDEC",
        "serve-harness started 1 launch(es) again after a known transient start-up failure:",
        f"  mm_epd_qwen3-vl-2b: {retry}",
        "serve-harness passed with declared upstream defects that held:",
        "  encoder-dtype on 1 case(s) (mm_epd_qwen3-vl-2b): gap 4.5e-03 within 4.53e-03",
    ]


def test_a_teardown_line_follows_the_outcome_of_the_case_whose_teardown_it_is() -> None:
    from harness.cases.progress_lines import AFTER_CASE, ProgressCount, case_line

    count = ProgressCount(["a", "b"], {})
    assert count.lines(f"{AFTER_CASE}agg torn down in 2.0 s") == []  # a's teardown
    assert count.lines(case_line("a", "passed", None, 3.0)) == [
        "[1/2] a: passed, 3.0 s; ETA 0 min 03 s",
        "agg torn down in 2.0 s",
    ]
    assert count.lines("launching epd") == ["launching epd"]
    count.lines(f"{AFTER_CASE}epd torn down in 3.0 s")
    assert count.flush() == ["epd torn down in 3.0 s"] and count.flush() == []
