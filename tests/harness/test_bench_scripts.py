"""Every bench script starts from a plain `python bench/NAME.py` (no PYTHONPATH) and says how to
use it; a broken import or argument parser shows here, not on the day someone needs the numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO_ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_answers_help(script: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=REPO_ROOT / "bench",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("usage:"), run.stdout[:300]


def test_there_are_bench_scripts() -> None:
    assert {p.name for p in SCRIPTS} >= {"time_to_verdict.py", "teardown_speed.py"}
