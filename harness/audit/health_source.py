"""Which worker roles have no health source unless the launcher gives them one.

A Dynamo worker's /health turns 200 through a health-check payload (a canary it registers) or
through `runtime.set_health_status(True)`. An encode worker (`--disaggregation-mode encode`)
registers no payload in either backend; whether it sets its own status is read from the
installed source, so the rule follows the Dynamo version actually installed:
- dynamo.vllm 1.6.1: never calls set_health_status -> needs DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS
  (without it /health stays 503 {"status":"notready","endpoints":{"generate":"ready"}});
- dynamo.sglang 1.6.1: init_multimodal_encode_worker calls set_health_status(True) after
  registering its model -> has a source of its own.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
from pathlib import Path

from harness.audit.findings import Invocation

ENDPOINT_HEALTH_ENV = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"
SETS_HEALTH = "set_health_status(True)"


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def encode_sets_own_health(module: str) -> bool:
    """True if the installed backend's encode-worker init reports health itself."""
    root = _package_dir(module)
    if root is None:
        return False
    if module == "dynamo.sglang":
        source = (root / "init_multimodal.py").read_text()
        for node in ast.parse(source).body:
            if (
                isinstance(node, ast.AsyncFunctionDef)
                and node.name == "init_multimodal_encode_worker"
            ):
                return SETS_HEALTH in (ast.get_source_segment(source, node) or "")
        return False
    return any(SETS_HEALTH in p.read_text() for p in root.rglob("*.py") if "tests" not in p.parts)


def registers_no_payload(call: Invocation) -> bool:
    return call.flag("--disaggregation-mode") == "encode"


def endpoint_health_names(call: Invocation) -> list[str]:
    raw = call.env.get(ENDPOINT_HEALTH_ENV, "")
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def lacks_health_source(call: Invocation) -> bool:
    if not registers_no_payload(call) or encode_sets_own_health(call.module):
        return False
    return "generate" not in endpoint_health_names(call)
