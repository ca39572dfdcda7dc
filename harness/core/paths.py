"""Where the harness keeps its caches and run directories."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "serve-harness"))


def runs_dir() -> Path:
    return Path(os.environ.get("HARNESS_RUNS", REPO_ROOT / "runs"))
