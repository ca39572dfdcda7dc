"""Pure report builders for ``serve-harness report``, from results.jsonl files.

Load, validate and merge results.jsonl (`harness.report.results`); render validation and A/B
tables (Markdown or HTML), an HTML page, timeline SVGs and JUnit (`harness.report.render`)."""

from harness.report.render import (
    compare_table,
    html_report,
    junit_properties,
    junit_xml,
    timeline_svg,
    validation_table,
)
from harness.report.results import (
    MergeError,
    ResultsFileError,
    latest_results,
    load_results,
    merge_results,
    run_of,
    schema_problems,
)

__all__ = [
    "MergeError",
    "ResultsFileError",
    "compare_table",
    "html_report",
    "junit_properties",
    "junit_xml",
    "latest_results",
    "load_results",
    "merge_results",
    "run_of",
    "schema_problems",
    "timeline_svg",
    "validation_table",
]
