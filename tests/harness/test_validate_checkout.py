"""`harness validate --dynamo-src PATH --base REF`: the seed's unpatched-versus-patched table for a
Dynamo checkout, on the CPU tier in minutes: its E/P/D launcher at the base (encode worker with
no health source) against its branch (with one)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.harness.dynamo_checkout import (
    build_checkout,
    commit_all,
    epd_launcher,
    write_launcher,
)

SRC_IDS = ["mm_epd_qwen3-vl-2b", "mm_epd_qwen3-vl-2b_b64_frontend_decoding"]


def seed_checkout(tmp_path: Path) -> Path:
    """A checkout whose last commit gives the encode worker its health source."""
    checkout = build_checkout(tmp_path / "dynamo", health_source=False)
    commit_all(checkout, "E/P/D launcher (encode worker without a health source)")
    write_launcher(checkout, epd_launcher(health_source=True))
    commit_all(checkout, "encode worker: DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS")
    return checkout


def test_the_changed_launcher_selects_its_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout = seed_checkout(tmp_path)
    assert main(["validate", "--dynamo-src", str(checkout), "--base", "HEAD~1", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert f"2 id(s), {checkout} at HEAD~1 vs now: {', '.join(SRC_IDS)}" in err
    assert main(["validate", "--dynamo-src", str(checkout)]) == 2  # no --base
    assert "--base REF" in capsys.readouterr().err
    assert main(["validate", "--dynamo-src", str(tmp_path), "--base", "HEAD"]) == 2
    assert "no components/src/dynamo" in capsys.readouterr().err


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_seed_table_for_a_checkout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = seed_checkout(tmp_path)
    started = time.monotonic()
    code = main(["validate", "--dynamo-src", str(checkout), "--base", "HEAD~1", "--ids",
                 SRC_IDS[0], "--results-dir", str(tmp_path / "out")])  # fmt: skip
    took = time.monotonic() - started
    table = capsys.readouterr().out
    print(f"\n{table}\n(validate took {took:.0f} s)")
    assert code == 0, table
    [row] = [line for line in table.splitlines() if line.startswith(f"| {SRC_IDS[0]} | failed")]
    assert "| passed |" in row and "no_health_source: worker 'encode'" in row
    assert "fixed" in row
    assert (tmp_path / "out" / "validation.md").read_text().strip() == table.strip()
