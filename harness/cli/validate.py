"""`python -m harness validate --image IMG --change SRC[:DST]… [--ids ID,…] [-- PYTEST_ARGS]`:
the serve ids a change affects, run twice in the image (as shipped, then with the change
overlaid) and the validation table, in markdown ready to paste into a PR description.

The recipe upstream used to prove its encode-health fix: mount the changed launcher into the CI
image, run the affected tests unpatched and patched, compare. Exit status: the changed run's.

`--dynamo-patch FILE` is the same on this machine, no image: the patch (site-packages paths)
made into a checkout of the installed Dynamo's Python, run against the installed one on the
CPU tier with `--strict-defects` on both sides (validate_local.py)."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cli.affected import launcher_texts
from harness.cli.change_map import affected
from harness.cli.common import CliError, add_profiles_option, profiles_in, reports_user_errors
from harness.cli.docker import (
    add_container_options,
    container_spec,
    docker_client,
    run_in_image,
)
from harness.cli.docker_run import DockerRunError, parse_overlay, pytest_command
from harness.cli.validate_checkout import run_checkout
from harness.cli.validate_local import SERVE_TESTS, render_sides, run_local, side_rows
from harness.core.paths import REPO_ROOT, runs_dir
from harness.profiles import Tier

SIDES = ("as shipped", "changed")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "validate",
        help="run a change's affected serve ids in an image, as shipped and changed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--change",
        action="append",
        default=[],
        metavar="SRC[:DST]",
        help="changed file SRC replacing the repo path DST (default: SRC's own repo path)",
    )
    parser.add_argument(
        "--dynamo-patch",
        type=Path,
        metavar="FILE",
        help="no image: a patch to the installed Dynamo's Python (site-packages paths), run "
        "on this machine against the installed one (default ids: those whose declared upstream "
        "defect is rooted in a file it touches)",
    )
    parser.add_argument(
        "--dynamo-src",
        metavar="PATH",
        help="no image: a Dynamo checkout (git), run as it is against itself at --base",
    )
    parser.add_argument("--base", metavar="REF", help="with --dynamo-src: the revision to compare")
    parser.add_argument("--ids", help="comma-separated subset of the affected ids to run")
    parser.add_argument("--tier", choices=["cpu", "gpu"], help="default: gpu with --gpus, else cpu")
    add_container_options(
        parser, image_help="image holding the checkout at --workdir", required=False
    )
    add_profiles_option(parser)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then pytest arguments")
    return parser


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
        print(f"harness validate: WARNING: {bind.source} is not executable and {repo_path} is: "
              f"its run will fail launcher_invalid (chmod +x it if that is not the change)",
              file=sys.stderr)  # fmt: skip
    return Change(Path(bind.source), repo_path)


def affected_ids(args: argparse.Namespace, changes: list[Change], tier: Tier) -> list[str]:
    """The ids the tier runs for these files (every one of `--ids`, which must be among them)."""
    paths = [c.repo_path for c in changes]
    report = affected(paths, profiles_in(args.profiles), launcher_texts(), (tier,))
    ids = [case.test_id for case in report.cases if case.cadence.get(tier)]
    if not ids:
        raise CliError(f"no serve case of the {tier} tier runs {', '.join(paths)}")
    if args.ids:
        wanted = [i.strip() for i in args.ids.split(",") if i.strip()]
        unknown = [i for i in wanted if i not in ids]
        if unknown:
            raise CliError(
                f"--ids: {', '.join(unknown)} not affected by {', '.join(paths)} on the {tier} "
                f"tier; affected: {', '.join(ids)}"
            )
        ids = wanted
    return ids


def side_results(results_dir: Path, side: str, changes: list[Change]) -> list[dict[str, Any]]:
    """The side's results, its launcher cells saying which copy ran and its cause cells what
    was seen; a run that wrote nothing gives no rows (its exit status is printed)."""
    changed = {c.repo_path for c in changes}

    def mark(launcher: str) -> str:
        return side if launcher in changed else f"unchanged, {side} run"

    return side_rows(results_dir / "results.jsonl", side, mark)


def render(
    args: argparse.Namespace,
    changes: list[Change],
    rows: dict[str, list[dict[str, Any]]],
    runs: list[tuple[str, int, float]],
) -> str:
    heading = [
        f"### Validation: {', '.join(c.repo_path for c in changes)}",
        "",
        f"Image `{args.image}`; changed: "
        + ", ".join(f"`{c.repo_path}` ← `{c.source.name}` (sha256 {c.digest()})" for c in changes),
    ]
    return render_sides(heading, SIDES, rows, runs)


@reports_user_errors
def run(args: argparse.Namespace) -> int:
    if args.dynamo_src is not None:
        if args.image or args.change or args.dynamo_patch or not args.base:
            raise CliError("--dynamo-src runs here against --base REF: no --image/--change")
        return run_checkout(args)
    if args.dynamo_patch is not None:
        if args.image or args.change:
            raise CliError("--dynamo-patch runs on this machine: give it without --image/--change")
        return run_local(args)
    if not args.image or not args.change:
        raise CliError("give --image and --change (or --dynamo-patch, to run here)")
    changes = [parse_change(spec, args.workdir) for spec in args.change]
    tier: Tier = args.tier or ("gpu" if args.gpus else "cpu")
    ids = affected_ids(args, changes, tier)
    extra = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    root = args.results_dir or runs_dir() / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"harness validate: {len(ids)} id(s) on the {tier} tier: {', '.join(ids)}",
          file=sys.stderr)  # fmt: skip
    client = None if args.dry_run else docker_client()
    rows: dict[str, list[dict[str, Any]]] = {}
    runs: list[tuple[str, int, float]] = []
    for side in SIDES:
        overlays = [f"{c.source}:{c.repo_path}" for c in changes] if side == "changed" else []
        results_dir = root / side.replace(" ", "-")
        command = pytest_command(args.python, [SERVE_TESTS, "--ids", ",".join(ids), *extra])
        spec = container_spec(args, command, overlays, results_dir)
        print(f"harness validate: {side} run\n{spec.describe()}", file=sys.stderr, flush=True)
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
    text = render(args, changes, rows, runs)
    (root / "validation.md").write_text(text + "\n")
    print(text)
    print(f"harness validate: table and both runs' results in {root}", file=sys.stderr)
    return runs[-1][1]
