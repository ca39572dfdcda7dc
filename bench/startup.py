"""Where each role's start-up goes, read from a finished CPU serve run: for every role of every
launch, the seconds from the launcher's start to each phase, from the role's own log (imports
done: its first timestamped Dynamo line; engine config resolved; the engine-core process's
first line; engine ready) and the harness's timeline (healthy) and phases (model listed, warmed
up). Prints a table per launch and the sums over the run; with a second run (`--baseline`), the
ratio of their totals. `--run` makes both runs itself, on the same cases (`--ids`, or the
post_merge suite), one after the other: the baseline with `--baseline-env VAR=VALUE` set (the
behaviour a change replaces), then without; it also prints each run's wall time and their ratio.

Usage: python bench/startup.py runs/results.jsonl [--baseline OTHER.jsonl]
       python bench/startup.py --run --baseline-env HARNESS_GC_THRESHOLD=   (Python's own GC)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness

from harness.core.paths import REPO_ROOT

DYNAMO_TS = re.compile(r"^(?:\x1b\[[\d;]*m)*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z")
VLLM_TS = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) ")
MARKS = {  # phase -> what its first line says (vLLM 0.31 / Dynamo 1.6.1 log text)
    "engine_config": "Resolved architecture",
    "engine_core_up": "(EngineCore pid=",
    "engine_ready": "init engine (profile, create kv cache, warmup model) took",
}
PHASES = ("imports", "engine_config", "engine_core_up", "engine_ready", "healthy")


def vllm_time(line: str, year: int) -> float | None:
    match = VLLM_TS.search(line)
    if match is None:
        return None
    stamp = dt.datetime.strptime(f"{year}-{match.group(1)}", "%Y-%m-%d %H:%M:%S")
    return stamp.replace(tzinfo=dt.UTC).timestamp()


def role_phases(log: Path, started: float) -> dict[str, float]:
    """Seconds after `started` (the role's pid file) at which each phase's first line shows."""
    found: dict[str, float] = {}
    year = dt.datetime.fromtimestamp(started, dt.UTC).year
    for line in log.read_text(errors="replace").splitlines():
        if "imports" not in found and (m := DYNAMO_TS.match(line)):
            stamp = dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC).timestamp()
            found["imports"] = stamp - started
        for phase, text in MARKS.items():
            if phase not in found and text in line and (t := vllm_time(line, year)) is not None:
                found[phase] = t - started
    return found


def launch_rows(result: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(role, phases) for every worker of one launch (its first case's result)."""
    logs = Path(result["run_dir"]) / "logs"
    rows = []
    healthy = {e["role"]: e["t"] for e in result["timeline"] if e["state"] == "ready"}
    for pid_file in sorted(logs.glob("*.pid")):
        role = pid_file.stem
        if not (logs / f"{role}.log").exists() or role in ("frontend", "event_broker"):
            continue
        phases = role_phases(logs / f"{role}.log", pid_file.stat().st_mtime)
        if role in healthy:
            phases["healthy"] = float(healthy[role])
        rows.append((role, phases))
    return rows


def first_cases(results_file: Path) -> list[dict[str, Any]]:
    """The result of each launch's first case (the one whose duration holds its start-up)."""
    rows = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    return [
        r
        for r in rows
        if r.get("run_dir") and not r.get("reused_topology") and r["outcome"] != "skipped"
    ]


def report(results_file: Path) -> dict[str, float]:
    """Print the table; return the run's sums (per phase, and ready / warmed up)."""
    totals = dict.fromkeys((*PHASES, "ready", "launches"), 0.0)
    for result in first_cases(results_file):
        print(f"\n{result['test_id']} (ready {result['ready_s']:.1f} s)")
        print(f"  {'role':<10}" + "".join(f"{p:>16}" for p in PHASES))
        for role, phases in launch_rows(result):
            cells = "".join(f"{phases[p]:>15.1f}s" if p in phases else f"{'-':>16}" for p in PHASES)
            print(f"  {role:<10}{cells}")
            for phase, seconds in phases.items():
                totals[phase] += seconds
        totals["ready"] += result["ready_s"] or 0.0
        totals["launches"] += 1
    print("\nsum over the run: " + ", ".join(f"{k} {v:.1f}" for k, v in totals.items()))
    return totals


def run_suite(ids: str | None, env: dict[str, str], out: Path) -> tuple[Path, float]:
    """Run the serve cases once; (its results.jsonl, its wall seconds)."""
    results = out / "results.jsonl"
    select = ["--ids", ids] if ids else ["-m", "post_merge"]
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/serve",
            "--tier",
            "cpu",
            *select,
            "--results",
            str(results),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    return results, time.monotonic() - started


def main() -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("results", nargs="?", type=Path, help="results.jsonl of a finished run")
    parser.add_argument("--baseline", type=Path, help="results.jsonl of the run to compare with")
    parser.add_argument("--run", action="store_true", help="make both runs (with --ids)")
    parser.add_argument("--ids", help="serve ids for --run (default: the post_merge suite)")
    parser.add_argument("--baseline-env", action="append", default=[], metavar="VAR=VALUE")
    args = parser.parse_args()
    walls: tuple[float, float] | None = None
    if args.run:
        tmp = Path(tempfile.mkdtemp(prefix="startup-bench-"))
        extra = dict(kv.split("=", 1) for kv in args.baseline_env)
        args.baseline, base_wall = run_suite(args.ids, {**os.environ, **extra}, tmp / "baseline")
        args.results, wall = run_suite(args.ids, dict(os.environ), tmp / "current")
        walls = (wall, base_wall)
    if args.results is None:
        parser.error("give a results.jsonl, or --run")
    current = report(args.results)
    if args.baseline is not None:
        print(f"\nbaseline ({args.baseline}):")
        base = report(args.baseline)
        for key in ("ready", *PHASES):
            if base[key]:
                print(
                    f"ratio {key}: {current[key] / base[key]:.2f}x the baseline "
                    f"({current[key]:.1f} s vs {base[key]:.1f} s)"
                )
    if walls is not None:
        print(
            f"ratio suite wall: {walls[0] / walls[1]:.2f}x the baseline "
            f"({walls[0]:.1f} s vs {walls[1]:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
