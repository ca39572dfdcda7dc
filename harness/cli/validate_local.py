"""`harness validate --dynamo-patch FILE [--ids ID,…]`: an unpatched-versus-patched run of the
installed Dynamo's Python on this machine's CPU tier, no image needed.

Side A runs the installed ai-dynamo as it ships; side B runs the same ids with the patch made into
a checkout (dynamo_patch.py) in front of it (`--dynamo-src`, whose import records prove every
role ran it). Both sides judge with `--strict-defects`: a declared upstream defect excuses
nothing, so the unpatched side fails naming it and the patched side must match the model's own
answer. Exit status: the patched run's."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.cli.common import CliError, profiles_in
from harness.cli.dynamo_patch import PatchError, defect_ids, patched_checkout, touched_files
from harness.core.paths import REPO_ROOT, runs_dir
from harness.report.schema import ResultsFileError, load_results
from harness.report.tables import compare_table, validation_table
from harness.runtime.dynamo_src import DYNAMO_SRC_ENV

SERVE_TESTS = "tests/serve"
LOCAL_SIDES = ("installed", "patched")
MESSAGE_CHARS = 160  # a cause message's first sentence ("worker 'encode' (port N) reports …")


def first_sentence(message: str) -> str:
    line = message.splitlines()[0]
    end = line.find(". ")
    text = line[: end + 1] if end >= 0 else line
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def local_ids(args: argparse.Namespace, files: list[str]) -> list[str]:
    if args.ids:
        return [i.strip() for i in args.ids.split(",") if i.strip()]
    ids = defect_ids(profiles_in(args.profiles), files)
    if not ids:
        raise CliError(f"no profile declares an upstream defect rooted in {', '.join(files)}; "
                       "name the ids with --ids")  # fmt: skip
    return ids


def side_rows(
    results: Path, side: str, mark: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """One side's results, each launcher cell saying which copy ran (`mark(launcher)`, default
    "<side> Dynamo") and each cause cell what was seen; a run that wrote nothing gives none."""
    if not results.is_file():
        return []
    try:
        rows = load_results(results)
    except ResultsFileError as exc:
        raise CliError(f"{side} run: {exc}") from None
    for row in rows:
        row["launcher"] = (
            f"{row['launcher']} ({mark(row['launcher']) if mark else side + ' Dynamo'})"
        )
        if row["cause"] and row.get("message"):
            row["cause"] = f"{row['cause']}: {first_sentence(row['message'])}"
    return rows


def render_sides(
    heading: list[str],
    sides: tuple[str, str],
    rows: dict[str, list[dict[str, Any]]],
    runs: list[tuple[str, int, float]],
) -> str:
    """The validation table (every row of both sides), the per-id comparison (A: the first
    side, B: the second) and each run's exit status and wall time, under `heading`."""
    return "\n".join([
        *heading,
        "",
        validation_table([row for side in sides for row in rows.get(side, [])], "md"),
        "",
        f"A: {sides[0]}, B: {sides[1]}",
        "",
        compare_table(rows.get(sides[0], []), rows.get(sides[1], []), "md"),
        "",
        "| run | exit | wall time |",
        "|---|---|---|",
        *(f"| {side} | {code} | {wall:.0f} s |" for side, code, wall in runs),
    ])  # fmt: skip


def run_side(
    side: str,
    ids: list[str],
    out: Path,
    extra: list[str],
    env: dict[str, str],
    strict: bool = True,
) -> int:
    """One side: the serve suite on exactly these ids (their baselines pulled in), on this
    machine's CPU tier, its results under `out`."""
    command = [sys.executable, "-m", "pytest", SERVE_TESTS, "--tier", "cpu",
               *(["--strict-defects"] if strict else []),
               "--ids", ",".join(ids), "--results", str(out / "results.jsonl"),
               "-p", "no:cacheprovider", *extra]  # fmt: skip
    print(f"harness validate: {side} run: {' '.join(command)}", file=sys.stderr, flush=True)
    try:  # the run's output on stderr (stdout is the table); inherited where it is no file
        err: int | None = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        err = None
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=err, stderr=err)
    return done.returncode


def run_local(args: argparse.Namespace) -> int:
    patch = Path(args.dynamo_patch)
    if not patch.is_file():
        raise CliError(f"--dynamo-patch {patch}: no such file")
    try:
        files = touched_files(patch)
    except PatchError as exc:
        raise CliError(str(exc)) from None
    ids = local_ids(args, files)
    extra = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    root = args.results_dir or runs_dir() / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-dynamo-patch-") as tmp:
        try:
            checkout = patched_checkout(patch, Path(tmp))
        except PatchError as exc:
            raise CliError(str(exc)) from None
        print(f"harness validate: {len(ids)} id(s), installed vs {patch.name}: {', '.join(ids)}",
              file=sys.stderr)  # fmt: skip
        if args.dry_run:
            return 0
        base = {k: v for k, v in os.environ.items() if k != DYNAMO_SRC_ENV}
        rows: dict[str, list[dict[str, Any]]] = {}
        runs: list[tuple[str, int, float]] = []
        for side in LOCAL_SIDES:
            env = {**base, DYNAMO_SRC_ENV: str(checkout)} if side == "patched" else base
            started = time.monotonic()
            code = run_side(side, ids, root / side, extra, env)
            if code in (2, 130):  # a usage error or Ctrl-C: no table to make
                return code
            runs.append((side, code, time.monotonic() - started))
            rows[side] = side_rows(root / side / "results.jsonl", side)
    text = render_local(patch, files, rows, runs)
    (root / "validation.md").write_text(text + "\n")
    print(text)
    print(f"harness validate: table and both runs' results in {root}", file=sys.stderr)
    return runs[-1][1]


def render_local(
    patch: Path,
    files: list[str],
    rows: dict[str, list[dict[str, Any]]],
    runs: list[tuple[str, int, float]],
) -> str:
    dynamo = metadata.version("ai-dynamo")
    heading = [
        f"### Validation: {patch.name} against the installed ai-dynamo {dynamo}",
        "",
        f"Patched: {', '.join(f'`{f}`' for f in files)}; both sides `--strict-defects` (a "
        "declared upstream defect excuses nothing).",
    ]
    return render_sides(heading, LOCAL_SIDES, rows, runs)
