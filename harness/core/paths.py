"""Where the harness keeps its caches and run directories."""

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
