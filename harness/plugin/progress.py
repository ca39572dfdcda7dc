"""Progress a person can follow through a long run: one line per launch event (launching, each
role's health changes with seconds since start, ready, each case's outcome, teardown), written
through pytest's terminal reporter. Quiet under `-q`. Under pytest-xdist a worker writes nothing
itself: its lines travel in each case's report and the controller writes them
(`write_relayed`)."""

from __future__ import annotations

import contextlib

import pytest

from harness.cases.progress_lines import PREFIX, PROPERTY, ProgressCount


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        # a line said while a case runs must get past pytest's output capture to be seen
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.quiet = config.get_verbosity() < 0
        self.relayed = hasattr(config, "workerinput")  # an xdist worker: the controller writes
        self.pending: list[str] = []
        self.count = ProgressCount([], {})  # the serve cases, once collected (plugin/reporting)

    def say(self, line: str) -> None:
        if self.quiet:
            return
        if self.relayed or self.reporter is None:
            self.pending.append(line)
            return
        uncaptured = (
            self.capture.global_and_fixture_disabled()
            if self.capture is not None
            else contextlib.nullcontext()
        )
        with uncaptured:
            for out in self.count.lines(line):
                self.reporter.ensure_newline()
                self.reporter.write_line(PREFIX + out)

    def relay_into(self, item: pytest.Item) -> None:
        """Hand the lines said so far to the case's report (xdist workers)."""
        item.user_properties += [(PROPERTY, line) for line in self.pending]
        self.pending.clear()


PROGRESS = pytest.StashKey[Progress]()
WRITTEN = pytest.StashKey[dict[str, int]]()


def progress_of(config: pytest.Config) -> Progress:
    if PROGRESS not in config.stash:
        config.stash[PROGRESS] = Progress(config)
    return config.stash[PROGRESS]


def write_relayed(config: pytest.Config, report: pytest.TestReport) -> None:
    """Controller side: the lines a worker handed over that are not written yet (a case's
    properties accumulate over its setup, call and teardown reports)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = [str(line) for name, line in report.user_properties if name == PROPERTY]
    written = config.stash.setdefault(WRITTEN, {})
    done = written.get(report.nodeid, 0)
    if reporter is None or config.get_verbosity() < 0:
        return
    for line in lines[done:]:
        for out in progress_of(config).count.lines(line):
            reporter.ensure_newline()
            reporter.write_line(PREFIX + out)
    written[report.nodeid] = len(lines)
