"""JUnit ``<property>`` name/value pairs describing one result."""

from __future__ import annotations

from typing import Any

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
