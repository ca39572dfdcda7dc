"""JUnit for serve results: ``<property>`` pairs describing one result, and a whole JUnit XML
file of a (merged) run, one ``<testcase>`` per result."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

DESCRIPTIVE_FIELDS = ("profile", "case", "tier", "stack", "launcher", "model", "outcome")


def junit_properties(result: dict[str, Any]) -> list[tuple[str, str]]:
    """E.g. ``[("profile", "agg_qwen3-vl-2b"), ..., ("ready_s", "41.200"),
    ("phase.readiness", "38.000")]``; cause and ready_s appear only when set."""
    properties = [(field, str(result[field])) for field in DESCRIPTIVE_FIELDS]
    if result.get("cause") is not None:
        properties.append(("cause", str(result["cause"])))
    if result.get("ready_s") is not None:
        properties.append(("ready_s", f"{float(result['ready_s']):.3f}"))
    properties.append(("duration_s", f"{float(result['duration_s']):.3f}"))
    properties.append(("started_at", str(result["started_at"])))
    properties += [
        (f"phase.{name}", f"{float(seconds):.3f}")
        for name, seconds in (result.get("phases") or {}).items()
    ]
    return properties


def junit_xml(results: list[dict[str, Any]], name: str = "serve") -> str:
    """A JUnit XML document: each result a testcase (classname = profile) with its properties;
    failed -> <failure>, error -> <error>, skipped -> <skipped>, carrying cause and message."""
    suite = ElementTree.Element("testsuite", name=name, tests=str(len(results)))
    counts = {"failed": 0, "error": 0, "skipped": 0}
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=str(result["profile"]),
            name=str(result["test_id"]),
            time=f"{float(result['duration_s']):.3f}",
        )
        properties = ElementTree.SubElement(case, "properties")
        for key, value in junit_properties(result):
            ElementTree.SubElement(properties, "property", name=key, value=value)
        outcome = result["outcome"]
        if outcome in counts:
            counts[outcome] += 1
            tag = {"failed": "failure", "error": "error", "skipped": "skipped"}[outcome]
            detail = ElementTree.SubElement(case, tag, message=str(result.get("message") or ""))
            detail.set("type", str(result.get("cause") or outcome))
    suite.set("failures", str(counts["failed"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
