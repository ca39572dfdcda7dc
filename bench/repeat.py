"""The same selection run N times back to back, as the main job runs it (`scripts/serve-suite`),
and per id: its outcome each time, and its timings with their spread (median, min-max). An id
that does not give the same outcome every time is a flake, listed with each run's cause and
message; exit 1 where there is one. A repeat reads the results files of the runs it made
(`--results DIR/run-K.jsonl`), so it measures exactly what a user's runs record.

Usage: python bench/repeat.py --runs 5 --ids mm_agg_qwen3-vl-2b,multimodal_e_pd_qwen
       python bench/repeat.py --runs 5 -m "pre_merge and upstream"      (upstream's gate)
       python bench/repeat.py --from runs/repeat-20261206-0300          (re-read, run nothing)"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.paths import REPO_ROOT, runs_dir


def spread(values: Sequence[float | None]) -> str:
    """'12.6 s [12.1-13.4]' over the runs that measured it; '-' where none did."""
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    low, high, mid = min(found), max(found), statistics.median(found)
    return f"{mid:.1f} s [{low:.1f}-{high:.1f}]"


def run(out: Path, runs: int, selection: list[str]) -> list[float]:
    """The suite `runs` times, one results file each; each run's wall time."""
    walls = []
    for k in range(1, runs + 1):
        results = out / f"run-{k}.jsonl"
        command = [
            str(REPO_ROOT / "scripts" / "serve-suite"),
            *selection,
            *("--results", str(results), "-p", "no:cacheprovider", "-q"),
        ]
        print(f"repeat: run {k}/{runs}: {' '.join(command)}", file=sys.stderr, flush=True)
        started = time.monotonic()
        subprocess.run(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, check=False)
        walls.append(time.monotonic() - started)
        print(f"repeat: run {k} took {walls[-1]:.0f} s", file=sys.stderr, flush=True)
    (out / "walls.json").write_text(json.dumps(walls))
    return walls


def read(out: Path) -> dict[str, list[dict[str, Any]]]:
    """id -> its result line in each run, in run order."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("run-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                by_id.setdefault(row["test_id"], []).append(row)
    return by_id


def report(by_id: dict[str, list[dict[str, Any]]], walls: list[float]) -> int:
    print("| id | outcomes | duration | ready | teardown |")
    print("|---|---|---|---|---|")
    flaky = []
    for test_id, rows in sorted(by_id.items()):
        outcomes = [r["outcome"] for r in rows]
        counted = ", ".join(f"{o} x{outcomes.count(o)}" for o in dict.fromkeys(outcomes))
        if len(set(outcomes)) > 1:
            flaky.append(test_id)
        print(
            f"| {test_id} | {counted} | {spread([r['duration_s'] for r in rows])} | "
            f"{spread([r.get('ready_s') for r in rows])} | "
            f"{spread([r.get('teardown_s') for r in rows])} |"
        )
    if walls:
        print(f"\nruns: {len(walls)}, wall {spread(walls)}")
    for test_id in flaky:
        print(f"\nFLAKY {test_id}:")
        for k, row in enumerate(by_id[test_id], start=1):
            print(f"  run {k}: {row['outcome']} {row.get('cause') or ''} {row['message'][:300]}")
    print(f"\n{len(flaky)} of {len(by_id)} id(s) did not give the same outcome every run")
    return 1 if flaky else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ids", help="the serve ids to repeat (their baselines come along)")
    parser.add_argument("-m", dest="marks", help="a pytest mark expression instead of --ids")
    parser.add_argument("--from", dest="done", type=Path, help="a repeat's directory: re-read")
    args = parser.parse_args()
    if args.done:
        walls_file = args.done / "walls.json"
        walls = json.loads(walls_file.read_text()) if walls_file.is_file() else []
        return report(read(args.done), walls)
    selection = ["--tier", "cpu"]
    selection += ["--ids", args.ids] if args.ids else []
    selection += ["-m", args.marks] if args.marks else []
    out = runs_dir() / f"repeat-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    walls = run(out, args.runs, selection)
    print(f"repeat: results in {out}", file=sys.stderr)
    return report(read(out), walls)


if __name__ == "__main__":
    raise SystemExit(main())
