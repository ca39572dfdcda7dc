"""A worker whose KV block the KV-aware frontend does not hash by is the launcher's fault, in
whichever order the two start: each role's adapter records itself, then looks at the other's
record (role_adapter.workers_off_the_router). Run as the launcher runs it: the adapter script,
one process per role (dry: records, starts nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch.dynamo_src import ROLE_ADAPTER

WORKER = ["-m", "dynamo.vllm", "--model", "m", "--block-size", "16"]


def frontend(block: str) -> list[str]:
    return ["-m", "dynamo.frontend", "--router-mode", "kv", "--kv-cache-block-size", block]


def adapted(log_dir: Path, argv: list[str], role: str | None) -> int:
    env = {
        **os.environ,
        "HARNESS_DEVICE": "gpu",
        "HARNESS_PROFILE_MODEL": "m",
        "HARNESS_REAL_PYTHON": sys.executable,
        "HARNESS_LOG_DIR": str(log_dir),
        "HARNESS_ADAPTER_DRY": "1",
    }
    if role is not None:
        env["HARNESS_ROLE"] = role
    done = subprocess.run(
        [sys.executable, str(ROLE_ADAPTER), *argv], env=env, capture_output=True, check=False
    )
    return done.returncode


@pytest.mark.parametrize("worker_first", [True, False], ids=["worker-first", "frontend-first"])
def test_the_worker_off_the_routers_blocks_is_named_in_either_order(
    tmp_path: Path, worker_first: bool
) -> None:
    steps = [(WORKER, "worker"), (frontend("32"), None)]
    codes = [
        adapted(tmp_path, argv, role) for argv, role in (steps if worker_first else steps[::-1])
    ]
    refused = json.loads((tmp_path / "worker.refused").read_text())
    assert refused["role"] == "worker" and refused["fault"] == "launcher"
    assert "KV blocks of 16 tokens" in refused["refused"] and "blocks of 32" in refused["refused"]
    # started second, the worker itself is refused; started first, the frontend names it
    assert codes == ([0, 0] if worker_first else [0, 2])


def test_blocks_that_agree_start(tmp_path: Path) -> None:
    assert [adapted(tmp_path, WORKER, "worker"), adapted(tmp_path, frontend("16"), None)] == [0, 0]
    assert not list(tmp_path.glob("*.refused"))
