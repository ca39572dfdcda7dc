"""Time to verdict per fault, against what a timeout-only harness would have waited.

Runs each fault scenario of tests/harness/faults.py once (real Dynamo frontend + mocker
topologies), plus the two E/P/D seed regressions with real vLLM workers under --with-vllm, and
prints: fault, cause, time to verdict (from the fault's own start: launch, kill, request, first
'no health source' sample, or the dead process's last log write), time from launch, the budget a
timeout-only harness would have waited (the profile's total budget; the request budget for faults
of a request), and the ratio (time from launch, or from the request for request faults, over
that budget), and each fault's bound (the tests assert the cause, not the time: the bounds are
held here; exit 1 if any is missed). Then the readiness overhead on a healthy mocker topology:
last worker ready (timeline) -> first request sent, goal <= 0.5 s. All measured in the same run.
Usage: python bench/time_to_verdict.py [--with-vllm] [--only NAME ...]
Run it under `flock /tmp/serve-harness-heavy.lock` when others share the machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness, tests

from harness.core.verdict import Cause
from tests.harness.faults import (
    FAULTS,
    Fault,
    FaultRun,
    healthy_readiness_overhead,
    run_fault,
)

READINESS_GOAL_S = 0.5


def seed_faults() -> list[Fault]:
    from tests.harness import test_seed_regressions as seed

    def no_health_source(tmp: Path) -> FaultRun:
        run = run_fault(seed.epd_profile(seed.launchers_copy(tmp, seed.HEALTH_LINE, "")))
        first = run.timeline.entered("no_health_source", role="encode")[0]
        if run.failure is not None:
            run.verdict_s = round(run.failure.evidence.elapsed_s - first, 3)
            run.note = f"from encode's first no_health_source sample at {first:.1f} s"
        return run

    def encode_never_up(tmp: Path) -> FaultRun:
        double = "start_role encode sleep infinity  # TEST DOUBLE\n"
        launcher = seed.launchers_copy(tmp, seed.ENCODE_CMD, double)
        return run_fault(seed.epd_profile(launcher, register_s=seed.REGISTER_S))

    return [
        Fault(
            "seed_epd_encode_no_health_source",
            Cause.NO_HEALTH_SOURCE,
            seed.NO_HEALTH_SOURCE_BOUND_S,
            no_health_source,
            role="encode",
        ),
        Fault(
            "seed_epd_encode_never_up",
            Cause.NEVER_REGISTERED,
            seed.REGISTER_S + 5,
            encode_never_up,
            role="encode",
        ),
    ]


def measure(faults: list[Fault]) -> list[tuple[Fault, FaultRun]]:
    out = []
    for fault in faults:
        with tempfile.TemporaryDirectory() as tmp:
            run = fault.scenario(Path(tmp))
        out.append((fault, run))
        print(f"  {fault.name}: {run.cause} in {run.verdict_s:.2f} s", file=sys.stderr)
    return out


def within_bound(fault: Fault, run: FaultRun) -> bool:
    """The fault's cause, within its bound, nothing left running: what the tests do not time."""
    return run.cause == fault.cause and run.verdict_s <= fault.bound_s and not run.leftovers


def table(rows: list[tuple[Fault, FaultRun]]) -> str:
    head = (
        "fault",
        "cause",
        "verdict s",
        "from launch s",
        "timeout-only s",
        "ratio",
        "bound s",
        "ok",
        "timed",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fault, run in rows:
        waited = run.verdict_s if run.request_phase else run.from_launch_s
        ok = within_bound(fault, run)
        cells = (
            fault.name,
            str(run.cause),
            f"{run.verdict_s:.2f}",
            f"{run.from_launch_s:.2f}",
            f"{run.timeout_only_s:.0f}",
            f"{waited / run.timeout_only_s:.3f}",
            f"{fault.bound_s:g}",
            "yes" if ok else "NO",
            run.note or "from launch",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-vllm", action="store_true", help="also the two E/P/D seeds")
    parser.add_argument("--only", nargs="*", default=None, help="fault names to run")
    args = parser.parse_args()
    faults = FAULTS + (seed_faults() if args.with_vllm else [])
    if args.only:
        faults = [f for f in faults if f.name in args.only]
    rows = measure(faults)
    print(table(rows))
    total_verdict = sum(r.from_launch_s for _, r in rows)
    total_budget = sum(r.timeout_only_s for _, r in rows)
    print(
        f"\nsum: {total_verdict:.1f} s to verdicts vs {total_budget:.0f} s timeout-only "
        f"(ratio {total_verdict / total_budget:.3f})"
    )
    marks = healthy_readiness_overhead()
    meets = "meets" if marks["overhead_s"] <= READINESS_GOAL_S else "MISSES"
    print(
        f"readiness overhead (last worker ready -> first request): {marks['overhead_s']:.3f} s, "
        f"{meets} the {READINESS_GOAL_S} s goal "
        f"(ratio {marks['overhead_s'] / READINESS_GOAL_S:.3f}); marks {marks}"
    )
    missed = [f.name for f, r in rows if not within_bound(f, r)]
    if missed:
        print(f"over their bound or wrong cause: {', '.join(missed)}")
    return 1 if missed or marks["overhead_s"] > READINESS_GOAL_S else 0


if __name__ == "__main__":
    sys.exit(main())
