"""`serve-harness validate image`: this repository's files overlaid on a container image's
checkout (`--change SRC[:DEST]`), the image's serve ids run as shipped and changed."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cli.affected import affected
from harness.cli.docker import (
    DockerRunError,
    container_spec,
    docker_client,
    parse_overlay,
    pytest_command,
    run_in_image,
)
from harness.cli.main import CliError, profiles_in, tier_chosen
from harness.cli.serve_runs import (
    SERVE_TESTS,
    Rows,
    Runs,
    render_sides,
    results_root,
    side_rows,
    write_table,
)
from harness.core.paths import REPO_ROOT
from harness.profiles import Tier

IMAGE_SIDES = ("as shipped", "changed")


@dataclass(frozen=True)
class Change:
    source: Path
    repo_path: str  # the file it replaces, relative to the checkout

    def digest(self) -> str:
        return hashlib.sha256(self.source.read_bytes()).hexdigest()[:12]


def parse_change(spec: str, workdir: str) -> Change:
    """`SRC[:DST]` -> the changed file and the repo path it replaces (both must exist)."""
    try:
        bind = parse_overlay(spec, workdir, REPO_ROOT, Path.cwd())
    except DockerRunError as exc:
        raise CliError(str(exc).replace("--overlay", "--change")) from None
    repo_path = Path(bind.target).relative_to(workdir).as_posix()
    if not (REPO_ROOT / repo_path).is_file():
        raise CliError(f"--change {spec!r}: {repo_path} is not a file of this checkout")
    if Path(bind.source).is_dir():
        raise CliError(f"--change {spec!r}: {bind.source} is a directory; give a file")
    if os.access(REPO_ROOT / repo_path, os.X_OK) and not os.access(bind.source, os.X_OK):
        print(
            f"serve-harness validate: WARNING: {bind.source} is not executable and {repo_path} is: "
            f"its run will fail launcher_invalid (chmod +x it if that is not the change)",
            file=sys.stderr,
        )
    return Change(Path(bind.source), repo_path)


def image_ids(args: argparse.Namespace, changes: list[Change], tier: Tier) -> list[str]:
    """The ids the tier runs for these files (every one of `--ids`, which must be among them)."""
    paths = [c.repo_path for c in changes]
    ids = affected(paths, profiles_in(args.profiles), tiers=(tier,)).ids(tier)
    if not ids:
        raise CliError(f"no serve case of the {tier} tier runs {', '.join(paths)}")
    if args.ids:
        unknown = [i for i in args.ids if i not in ids]
        if unknown:
            raise CliError(
                f"--ids: {', '.join(unknown)} not affected by {', '.join(paths)} on the {tier} "
                f"tier; affected: {', '.join(ids)}"
            )
        ids = args.ids
    return ids


def side_results(results_dir: Path, side: str, changes: list[Change]) -> list[dict[str, Any]]:
    """The side's results, its launcher cells saying which copy ran and its cause cells what
    was seen; a run that wrote nothing gives no rows (its exit status is printed)."""
    changed = {c.repo_path for c in changes}

    def mark(launcher: str) -> str:
        return side if launcher in changed else f"unchanged, {side} run"

    return side_rows(results_dir / "results.jsonl", side, mark)


def render_image(args: argparse.Namespace, changes: list[Change], rows: Rows, runs: Runs) -> str:
    heading = [
        f"### Validation: {', '.join(c.repo_path for c in changes)}",
        "",
        f"Image `{args.image}`; changed: "
        + ", ".join(f"`{c.repo_path}` ← `{c.source.name}` (sha256 {c.digest()})" for c in changes),
    ]
    return render_sides(heading, IMAGE_SIDES, rows, runs)


def run_image(args: argparse.Namespace) -> int:
    """The serve ids a change affects (those `affected --tier TIER` lists as run on the tier),
    run twice in the image, as shipped and then with the change overlaid, and the validation
    table.

    The recipe upstream used to prove its encode-health fix: mount the changed launcher into
    the CI image, run the affected tests unpatched and patched, compare. Exit status: the
    changed run's."""
    changes = [parse_change(spec, args.workdir) for spec in args.change]
    tier: Tier = tier_chosen(args.tier) or ("gpu" if args.gpus else "cpu")
    ids = image_ids(args, changes, tier)
    root = results_root(args, "validate")
    print(
        f"serve-harness validate: {len(ids)} id(s) on the {tier} tier: {', '.join(ids)}",
        file=sys.stderr,
    )
    client = None if args.dry_run else docker_client()
    rows: Rows = {}
    runs: Runs = []
    for side in IMAGE_SIDES:
        overlays = [f"{c.source}:{c.repo_path}" for c in changes] if side == "changed" else []
        results_dir = root / side.replace(" ", "-")
        command = pytest_command(
            args.python, [SERVE_TESTS, "--ids", ",".join(ids), *args.pytest_args]
        )
        spec = container_spec(args, command, overlays, results_dir)
        print(f"serve-harness validate: {side} run\n{spec.describe()}", file=sys.stderr, flush=True)
        if client is None:
            continue
        started = time.monotonic()
        code = run_in_image(spec, results_dir, client, sys.stderr.buffer)  # stdout: the table
        if code == 130:
            return 130
        runs.append((side, code, time.monotonic() - started))
        rows[side] = side_results(results_dir, side, changes)
    if client is None:
        return 0
    write_table(render_image(args, changes, rows, runs), root)
    return runs[-1][1]


# The command line: one subparser per mode, each with its own options only.
