"""Fail fast with a named cause: each fault, with real processes, gives its cause within its
time bound and leaves nothing behind (no process with the topology's marker, no leased port open).

Real Dynamo frontend + mocker workers (a real worker runtime with a stand-in engine) throughout;
the only double is the `hang` worker (tests/harness/launchers/fault_double_silent_worker.sh).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.faults import FAULTS, Fault, healthy_readiness_overhead

READINESS_OVERHEAD_GOAL_S = 0.5


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_named_fast_and_clean(
    fault: Fault, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    run = fault.scenario(tmp_path)
    record_property("verdict_s", run.verdict_s)
    record_property("from_launch_s", run.from_launch_s)
    print(f"\n{fault.name}: {run.cause} in {run.verdict_s:.2f} s ({run.note or 'from start'})")
    assert run.failure is not None, f"{fault.name}: no failure at all"
    assert run.cause == fault.cause, run.failure.report()
    assert run.verdict_s <= fault.bound_s, (
        f"{fault.name}: verdict after {run.verdict_s:.2f} s > bound {fault.bound_s} s "
        f"({run.note or 'from start'})\n{run.failure.report()}"
    )
    if fault.role is not None:
        assert run.failure.evidence.role == fault.role, run.failure.report()
    if fault.exit_code is not None:
        assert run.failure.evidence.exit_code == fault.exit_code, run.failure.report()
    assert not run.leftovers, f"processes left: {run.leftovers}"
    assert not run.listening, f"leased ports still listening: {run.listening}"
    assert "teardown" not in run.failure.evidence.detail, run.failure.evidence.detail


def test_readiness_overhead_is_small() -> None:
    """Healthy topology: from the last worker turning ready to the first request, <= 0.5 s."""
    marks = healthy_readiness_overhead()
    print(f"\nreadiness: {marks}")
    assert marks["overhead_s"] <= READINESS_OVERHEAD_GOAL_S, marks
