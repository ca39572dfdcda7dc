"""`serve-harness validate patch`: the installed ai-dynamo against a checkout of it with a patch
applied (`patched_checkout`), the serve ids whose declared defects the patch touches."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
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
from harness.profiles import Profile
from harness.topology.dynamo_src import DYNAMO_SRC_ENV
from harness.topology.launch_spec import PYTHON_ONLY

TOUCHED = re.compile(r"^\+\+\+ (?:b/)?(dynamo/\S+)", re.MULTILINE)
PATCH_SIDES = ("installed", "patched")


class PatchError(ValueError):
    """A patch that cannot make a checkout; the message names the file and why."""


def touched_files(patch: Path) -> list[str]:
    """The site-packages paths the patch changes, e.g. dynamo/vllm/multimodal_utils/model.py."""
    files = TOUCHED.findall(patch.read_text())
    if not files:
        raise PatchError(
            f"{patch}: no '+++ b/dynamo/…' file in it (paths relative to "
            "site-packages, as `diff -ru` from there writes them)"
        )
    return files


def patched_checkout(patch: Path, out_dir: Path, site: Path | None = None) -> Path:
    """`out_dir`, laid out like a Dynamo checkout holding the patched packages."""
    site = site or Path(sysconfig.get_paths()["purelib"])
    src = out_dir / "components" / "src"
    for package in sorted({"/".join(f.split("/")[:2]) for f in touched_files(patch)}):
        installed = site / package
        if not installed.is_dir():
            raise PatchError(f"{patch}: touches {package}, which {site} does not hold")
        shutil.copytree(installed, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    (out_dir / PYTHON_ONLY).write_text(f"the installed ai-dynamo with {patch.name} applied\n")
    done = subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "-d", str(src), "-i", str(patch.resolve())],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise PatchError(
            f"{patch}: does not apply to the installed ai-dynamo: "
            f"{(done.stdout + done.stderr).strip()[-400:]}"
        )
    return out_dir


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
        return args.ids
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
