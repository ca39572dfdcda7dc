"""`serve-harness validate patch`: the installed ai-dynamo against a checkout of it with a patch
applied (`patched_checkout`), the serve ids whose declared defects the patch touches."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from harness.cli.main import CliError, profiles_in
from harness.cli.serve_runs import (
    Rows,
    Runs,
    render_sides,
    results_root,
    run_side,
    side_rows,
    write_table,
)
from harness.launch.dynamo_patch import PatchError, patched_checkout, touched_files
from harness.launch.dynamo_src import DYNAMO_SRC_ENV
from harness.profiles import Profile

PATCH_SIDES = ("installed", "patched")


def defect_ids(profiles: list[Profile], files: list[str]) -> list[str]:
    """The CPU ids whose declared upstream defect is rooted in one of `files` (site-packages
    paths): the ids the patch is meant to turn from failing to passing. Not `affected()`, which
    gives every id that runs a changed file: every vLLM id runs dynamo/vllm."""
    return [
        p.test_id(case)
        for p in profiles
        for case in p.cases
        if any(
            defect.root_cause.file in files
            for r in (case, *case.follow_ups)
            for defect in r.cpu.defects
        )
    ]


def patch_ids(args: argparse.Namespace, files: list[str]) -> list[str]:
    if args.ids:
        return list(args.ids)
    ids = defect_ids(profiles_in(args.profiles), files)
    if not ids:
        raise CliError(
            f"no profile declares an upstream defect rooted in {', '.join(files)}; "
            "name the ids with --ids"
        )
    return ids


def run_patch(args: argparse.Namespace) -> int:
    """An unpatched-versus-patched run of the installed Dynamo's Python on this machine's CPU
    tier, no image needed.

    The patch is a unified diff whose paths are site-packages paths (`a/dynamo/vllm/…`, as
    `diff -ru site-packages/dynamo patched/dynamo` writes them). Every `dynamo.<package>` it
    touches is copied out of site-packages into `<dir>/components/src/dynamo/<package>` and
    patched there with GNU patch. Nothing installed is modified.

    Side A runs the installed ai-dynamo as it ships; side B runs the same ids with that patched
    checkout in front of it (`--dynamo-src`, whose import records prove every role ran it). Both
    sides judge with `--strict-defects`: a declared upstream defect excuses nothing, so the
    unpatched side fails naming it and the patched side must match the model's own answer.
    Default ids: those whose declared upstream defect is rooted in a file the patch touches.
    Exit status: the patched run's."""
    patch: Path = args.patch
    if not patch.is_file():
        raise CliError(f"{patch}: no such file")
    try:
        files = touched_files(patch)
    except PatchError as exc:
        raise CliError(str(exc)) from None
    ids = patch_ids(args, files)
    root = results_root(args, "validate")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-dynamo-patch-") as tmp:
        try:
            checkout = patched_checkout(patch, Path(tmp))
        except PatchError as exc:
            raise CliError(str(exc)) from None
        print(
            f"serve-harness validate: {len(ids)} id(s), installed vs {patch.name}: "
            f"{', '.join(ids)}",
            file=sys.stderr,
        )
        if args.dry_run:
            return 0
        base = {k: v for k, v in os.environ.items() if k != DYNAMO_SRC_ENV}
        rows: Rows = {}
        runs: Runs = []
        for side in PATCH_SIDES:
            env = {**base, DYNAMO_SRC_ENV: str(checkout)} if side == "patched" else base
            started = time.monotonic()
            code = run_side(side, ids, root / side, args.pytest_args, env)
            if code in (2, 130):  # a usage error or Ctrl-C: no table to make
                return code
            runs.append((side, code, time.monotonic() - started))
            rows[side] = side_rows(root / side / "results.jsonl", side)
    write_table(render_patch(patch, files, rows, runs), root)
    return runs[-1][1]


def render_patch(patch: Path, files: list[str], rows: Rows, runs: Runs) -> str:
    dynamo = metadata.version("ai-dynamo")
    heading = [
        f"### Validation: {patch.name} against the installed ai-dynamo {dynamo}",
        "",
        f"Patched: {', '.join(f'`{f}`' for f in files)}; both sides `--strict-defects` (a "
        "declared upstream defect excuses nothing).",
    ]
    return render_sides(heading, PATCH_SIDES, rows, runs)


# `validate checkout`: a Dynamo checkout at a base revision against its working tree.
