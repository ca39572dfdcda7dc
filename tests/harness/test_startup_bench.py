"""bench/startup.py reads each phase from a role's own log lines (Dynamo's ISO stamps, vLLM's)."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path

from harness.core.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("startup", REPO_ROOT / "bench" / "startup.py")
assert spec is not None and spec.loader is not None
startup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(startup)

LOG = """Triton is installed, but `triton.backends` could not be imported.
\x1b[2m2026-12-01T16:55:26.601807Z\x1b[0m  WARN __init__: dynamo.nixl_connect: Failed to load CuPy
(MainProcess pid=1005) INFO 12-01 16:55:26 [model.py:699] Resolved architecture: Qwen3VLForCond
(EngineCore pid=1032) WARNING 12-01 16:55:35 [indexer_topk.py:35] Failed to import DeepSelect
(EngineCore pid=1032) INFO 12-01 16:55:35 [core.py:380] init engine (profile, create kv cache, \
warmup model) took 0.02 s
""".replace("\\\n", "")


def test_phases_come_from_the_roles_own_lines(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(LOG)
    started = dt.datetime(2026, 12, 1, 16, 55, 18, 551000, dt.UTC).timestamp()
    phases = startup.role_phases(log, started)
    assert round(phases["imports"], 2) == 8.05
    assert round(phases["engine_config"]) == 7  # vLLM stamps whole seconds
    assert round(phases["engine_core_up"]) == round(phases["engine_ready"]) == 16
