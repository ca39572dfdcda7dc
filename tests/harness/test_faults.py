"""A named cause for each fault: with real processes, each fault gives its own cause (the role
and exit code where it has them) and leaves nothing behind (no process with the topology's marker,
no leased port open). How fast each verdict comes is measured in bench/time_to_verdict.py against
each fault's bound, not asserted here: a wall-time assertion is a flake on a shared machine.

Real Dynamo frontend + mocker workers (a real worker runtime with a stand-in engine) throughout;
the only double is the `hang` worker (tests/harness/launchers/fault_double_silent_worker.sh).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.faults import FAULTS, Fault


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_named_and_clean(
    fault: Fault, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    run = fault.scenario(tmp_path)
    record_property("verdict_s", run.verdict_s)
    record_property("from_launch_s", run.from_launch_s)
    print(f"\n{fault.name}: {run.cause} in {run.verdict_s:.2f} s ({run.note or 'from start'})")
    assert run.failure is not None, f"{fault.name}: no failure at all"
    assert run.cause == fault.cause, run.failure.report()
    if fault.role is not None:
        assert run.failure.evidence.role == fault.role, run.failure.report()
    if fault.exit_code is not None:
        assert run.failure.evidence.exit_code == fault.exit_code, run.failure.report()
    assert not run.leftovers, f"processes left: {run.leftovers}"
    assert not run.listening, f"leased ports still listening: {run.listening}"
    assert "teardown" not in run.failure.evidence.detail, run.failure.evidence.detail
