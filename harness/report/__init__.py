"""Pure report builders for ``python -m harness report``, from results.jsonl files.

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
    load_results,
    merge_results,
    schema_problems,
)

__all__ = [
    "MergeError",
    "ResultsFileError",
    "compare_table",
    "html_report",
    "junit_properties",
    "junit_xml",
    "load_results",
    "merge_results",
    "schema_problems",
    "timeline_svg",
    "validation_table",
]
