"""What a finished case leaves (pytest's report phase): its results.jsonl line, JUnit
properties, the verdict's evidence in the report, the session's summary lines.

A serve run reads as one log: each case's outcome is a progress line of its own ("<id>:
passed, 31.2 s"), so pytest's progress letters and file path are left out for serve cases while
those lines are shown (default verbosity; `-v` keeps pytest's own lines, `-q` shows neither)."""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pluggy import Result

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.progress_lines import PREFIX, ProgressCount, case_line
from harness.cases.result_record import ResultsFile, result_record
from harness.cases.selection import eta_durations
from harness.core.secrets import scrub_text
from harness.core.verdict import TopologyFailure
from harness.plugin.collection import PULLED_IN, SHARD_PLAN, serve_case_of
from harness.plugin.fixtures import RECORD
from harness.plugin.options import session_of
from harness.plugin.progress import progress_of, write_relayed
from harness.report.render import junit_properties

UNJUDGED_NUMERICALLY = pytest.StashKey[list[tuple[str, str]]]()  # (test id, why) per request


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for line in progress_of(config).count.flush():
        terminalreporter.write_line(PREFIX + line)
    if SHARD_PLAN in config.stash:
        shard, plan = config.stash[SHARD_PLAN]
        terminalreporter.write_line(
            f"serve-harness shard {shard}: {len(plan.of(shard))} case(s), predicted "
            f"{plan.seconds[shard.index - 1]:.0f} s (all shards: {plan.seconds})"
        )
    unjudged = config.stash.get(UNJUDGED_NUMERICALLY, [])
    if unjudged:
        whys = sorted({why for _, why in unjudged})
        terminalreporter.write_line(
            f"serve-harness judged without a numeric oracle: {len(unjudged)} request(s) "
            f"({', '.join(sorted({tid for tid, _ in unjudged}))}), because: {' | '.join(whys)}"
        )
    for line in checkout_lines(config.stash.get(SERVE_CASES, [])):
        terminalreporter.write_line(line)
    summary = config.pluginmanager.get_plugin("serve-harness-summary")
    for line in summary.lines() if isinstance(summary, RunSummary) else []:
        terminalreporter.write_line(line)
    pulled = config.stash.get(PULLED_IN, [])
    if pulled:
        terminalreporter.write_line(
            f"serve-harness pulled in {len(pulled)} baseline case(s) the selection left out: "
            + ", ".join(node.split("[")[-1].rstrip("]") for node in pulled)
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    sc = serve_case_of(item)
    if sc is not None:
        progress_of(item.config).relay_into(item)  # xdist: into this report's properties
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if sc is None:
        return
    record = item.stash.setdefault(RECORD, CaseRecord())
    failure = call.excinfo.value if call.excinfo else None
    if isinstance(failure, TopologyFailure):
        _attach_evidence(report, failure, record)
    if report.when == "call" or not report.passed:
        record.report = record.report if report.when == "teardown" and record.report else report
        record.failure = record.failure or failure
    if report.when == "teardown":
        if not report.passed:
            record.teardown_failure = failure
        if record.report is None:
            return
        result = result_record(sc, record)
        why = result["cause"] or (
            skip_reason(record.report) if result["outcome"] == "skipped" else None
        )
        report.user_properties.append((OUTCOME, json.dumps(summary_entry(result, why))))
        progress_of(item.config).say(
            case_line(sc.test_id, result["outcome"], why, result["duration_s"])
        )
        report.user_properties.extend(junit_properties(result))  # JUnit <property> for dashboards
        unjudged = item.config.stash.setdefault(UNJUDGED_NUMERICALLY, [])
        unjudged += [(sc.test_id, why) for why in result["unjudged_numerically"]]
        path = item.config.getoption("--results")
        if path:
            ResultsFile(Path(path)).append(result)


OUTCOME = "serve-harness outcome"  # a case's outcome for the run's summary (RunSummary)
HELD = re.compile(r"upstream defect (\S+) holds: (.*)")


def summary_entry(result: dict[str, Any], why: str | None) -> dict[str, Any]:
    """What the run's closing summary needs of one case: its id, outcome, why, and each declared
    upstream defect that held on it (with the line that says by how much)."""
    held = [m.groups() for line in result["checks"] if (m := HELD.search(line))]
    return {
        "id": result["test_id"],
        "outcome": result["outcome"],
        "why": why,
        "held": held,
        "retries": result["retries"],
    }


class RunSummary:
    """The closing lines of a serve run (on the controller under xdist): every skipped id with
    its reason, every launch started again after a transient start-up failure, every declared
    upstream defect that held with its cases and its bound."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.entries += [json.loads(str(v)) for k, v in report.user_properties if k == OUTCOME]

    def lines(self) -> list[str]:
        out = []
        skipped = [e for e in self.entries if e["outcome"] == "skipped"]
        if skipped:
            out.append(f"serve-harness skipped {len(skipped)} case(s):")
            out += [f"  {e['id']}: {e['why'] or 'no reason given'}" for e in skipped]
        retried = [e for e in self.entries if e.get("retries")]
        if retried:
            out.append(
                f"serve-harness started {len(retried)} launch(es) again after a known transient "
                "start-up failure:"
            )
            out += [f"  {e['id']}: {' | '.join(e['retries'])}" for e in retried]
        held: dict[str, list[tuple[str, str]]] = {}
        for e in self.entries:
            for defect, detail in e["held"]:
                held.setdefault(defect, []).append((e["id"], detail))
        if held:
            out.append("serve-harness passed with declared upstream defects that held:")
            for defect, seen in sorted(held.items()):
                ids = sorted({i for i, _ in seen})
                out.append(f"  {defect} on {len(ids)} case(s) ({', '.join(ids)}): {seen[0][1]}")
        return out


def skip_reason(report: pytest.TestReport) -> str | None:
    """A skipped report's reason (pytest keeps it as (file, line, "Skipped: why"))."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return None


def _attach_evidence(report: pytest.TestReport, failure: TopologyFailure, rec: CaseRecord) -> None:
    report.sections.append(("serve-harness verdict", failure.report()))
    topo = rec.topology
    if topo is None:
        return
    events = "\n".join(json.dumps(e) for e in topo.timeline.events)
    report.sections.append(("health timeline", events))
    for role in topo.plan.roles:
        path = topo.role_log(role.name)
        if path is not None:
            text = scrub_text(topo.role_log_tail(role.name, 40), topo.plan.env)
            report.sections.append((f"log {role.name} ({path})", text))


class RelayedProgress:
    """On the controller: writes the progress lines xdist workers relayed in their reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        write_relayed(self.config, report)


SERVE_NODEIDS = pytest.StashKey[set[str]]()
SERVE_CASES = pytest.StashKey[list[ServeCase]]()


def checkout_lines(cases: list[ServeCase]) -> list[str]:
    """Under --dynamo-src: how many selected cases ran the checkout's own launchers, the ones
    that could not (the checkout has none for them), and the baselines ours ran in their place,
    each with why."""
    launched = [sc for sc in cases if sc.signature is not None]
    if not launched or launched[0].launch_spec.source is None:
        return []
    root = launched[0].launch_spec.source.root
    missing = [sc for sc in launched if sc.launch_spec.choice.missing]
    on_checkout = [sc for sc in launched if sc.launch_spec.choice.origin == "checkout"]
    lines = [
        f"serve-harness checkout {root}: {len(on_checkout) - len(missing)} case(s) on its own "
        f"launchers, {len(missing)} not run for want of one, "
        f"{len(launched) - len(on_checkout)} on ours"
    ]
    lines += [f"  {sc.test_id}: {sc.launch_spec.choice.missing}" for sc in missing]
    lines += [
        f"  {sc.test_id}: {sc.launch_spec.choice.why}"
        for sc in launched
        if sc.baseline and sc.launch_spec.choice.origin == "ours"
    ]
    return lines


def logs_cases(config: pytest.Config) -> bool:
    """The progress lines carry each case's outcome: pytest's own per-test output is left out."""
    return config.get_verbosity() == 0


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    serve = {item.nodeid for item in session.items if serve_case_of(item) is not None}
    session.config.stash[SERVE_NODEIDS] = serve
    cases = [sc for item in session.items if (sc := serve_case_of(item)) is not None]
    session.config.stash[SERVE_CASES] = cases
    config = session.config
    durations, results = config.getoption("--durations-from"), config.getoption("--results")
    recorded = eta_durations(
        Path(durations) if durations else None,
        Path(results) if results else None,
        session_of(config).tier,
    )
    progress_of(config).count = ProgressCount([sc.test_id for sc in cases], recorded)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if serve and len(serve) == len(session.items) and logs_cases(session.config) and reporter:
        reporter.showfspath = False


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str] | None:
    """A serve case's status with no letter: its progress line says the outcome. The category
    is pytest's own, so the summary counts stay the same."""
    if report.nodeid not in config.stash.get(SERVE_NODEIDS, set()) or not logs_cases(config):
        return None
    if report.when == "call" or report.skipped:
        return report.outcome, "", ""
    return ("error" if report.failed else ""), "", ""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(RelayedProgress(config), "serve-harness-progress")
        config.pluginmanager.register(RunSummary(), "serve-harness-summary")
