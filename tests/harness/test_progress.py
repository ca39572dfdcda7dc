"""Progress lines: written at once through the terminal reporter, nothing under -q, and under
xdist relayed through each case's report and written once by the controller."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from harness.cases.results import PROPERTY, Progress, write_relayed


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
