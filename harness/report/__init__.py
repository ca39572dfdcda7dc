"""Pure report builders for ``python -m harness report``: load and validate results.jsonl,
render validation and A/B tables (Markdown or HTML), timeline SVGs and JUnit properties."""

from harness.report.html_page import html_report
from harness.report.junit import junit_properties, junit_xml
from harness.report.merge import MergeError, merge_results
from harness.report.schema import ResultsFileError, load_results, schema_problems
from harness.report.tables import compare_table, validation_table
from harness.report.timeline import timeline_svg

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
