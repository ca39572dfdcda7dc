"""The serve ids a change affects, run twice (without the change, then with it), and the table
of the two runs in markdown, ready to paste into a PR description. Exit status: the run with
the change's. `serve-harness validate MODE --help` says what each mode's two runs are and which
ids it picks."""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar, overload

from harness.cli.affected import affected, changed_files
from harness.cli.docker import (
    DockerRunError,
    add_container_options,
    container_spec,
    docker_client,
    parse_overlay,
    pytest_command,
    run_in_image,
)
from harness.cli.main import CliError, add_profiles_option, profiles_in, reports_user_errors
from harness.cli.serve_runs import (
    SERVE_TESTS,
    Rows,
    Runs,
    listed_ids,
    results_root,
    run_side,
    side_rows,
    tree_at,
)
from harness.core.paths import REPO_ROOT
from harness.profiles import Profile, Tier
from harness.report.render import compare_table, validation_table
from harness.topology.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError

ORDER = 80  # its place in `serve-harness --help` (harness/cli/main.py)


# What every mode shares: its two runs' results, one table of them.


def render_sides(heading: list[str], sides: tuple[str, str], rows: Rows, runs: Runs) -> str:
    """The validation table (every row of both sides), the per-id comparison (A: the first
    side, B: the second) and each run's exit status and wall time, under `heading`."""
    return "\n".join(
        [
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
        ]
    )


def write_table(text: str, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "validation.md").write_text(text + "\n")
    print(text)
    print(f"harness validate: table and both runs' results in {root}", file=sys.stderr)


# `validate patch`: the installed ai-dynamo against a checkout of it with the patch applied.

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
            f"harness validate: {len(ids)} id(s), installed vs {patch.name}: {', '.join(ids)}",
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


def run_checkout(args: argparse.Namespace) -> int:
    """The serve ids a change to a Dynamo checkout affects (those `affected --dynamo-src PATH
    --base REF` lists for the CPU tier), run on this machine's CPU tier twice: with the checkout
    as it was at REF and as it is now (both its launchers and its Python, `--dynamo-src`), and
    the table of the two.

    For a branch that gives the encode worker its health source: the E/P/D launcher without
    its encode health line at REF fails `no_health_source` naming encode, the branch passes.
    Exit status: the change's."""
    checkout = args.checkout.resolve()
    try:
        DynamoSource(checkout).check()
    except DynamoSourceError as exc:
        raise CliError(str(exc)) from None
    files = changed_files(args.base, checkout)
    ids = args.ids
    if not ids:
        report = affected(files, profiles_in(args.profiles), tiers=("cpu",), checkout=True)
        ids = report.ids("cpu")
    if not ids:
        raise CliError(f"no CPU-tier serve case runs what changed since {args.base}: {files}")
    sides = (f"base {args.base}", "change")
    print(
        f"harness validate: {len(ids)} id(s), {checkout} at {args.base} vs now: {', '.join(ids)}",
        file=sys.stderr,
    )
    if args.dry_run:
        return 0
    root = results_root(args, "validate")
    rows: Rows = {}
    runs: Runs = []
    with tempfile.TemporaryDirectory(prefix="harness-dynamo-base-") as tmp:
        trees = {sides[0]: tree_at(checkout, args.base, Path(tmp)), sides[1]: checkout}
        for side in sides:
            env = {**os.environ, DYNAMO_SRC_ENV: str(trees[side])}
            out = root / side.replace(" ", "-")
            started = time.monotonic()
            code = run_side(side, ids, out, args.pytest_args, env, strict=False)
            if code in (2, 130):
                return code
            runs.append((side, code, time.monotonic() - started))
            rows[side] = side_rows(out / "results.jsonl", side, lambda _l, s=side: s)
    changed = ", ".join(f"`{f}`" for f in files) or "nothing"
    heading = [
        f"### Validation: {checkout.name} at {args.base} against its working tree",
        "",
        f"Changed: {changed}; every role runs the checkout's Python and, where a profile names "
        "one, its launcher (`--dynamo-src`).",
    ]
    write_table(render_sides(heading, sides, rows, runs), root)
    return runs[-1][1]


# `validate image`: this repository's files overlaid on a container image's checkout.

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
            f"harness validate: WARNING: {bind.source} is not executable and {repo_path} is: "
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
    tier: Tier = args.tier or ("gpu" if args.gpus else "cpu")
    ids = image_ids(args, changes, tier)
    root = results_root(args, "validate")
    print(
        f"harness validate: {len(ids)} id(s) on the {tier} tier: {', '.join(ids)}", file=sys.stderr
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
    write_table(render_image(args, changes, rows, runs), root)
    return runs[-1][1]


# The command line: one subparser per mode, each with its own options only.

MODES: dict[str, Callable[[argparse.Namespace], int]] = {
    "patch": run_patch,
    "checkout": run_checkout,
    "image": run_image,
}
PYTEST_ARGS = "-- PYTEST_ARGS"
N = TypeVar("N")  # the namespace argparse fills


class ModeParser(argparse.ArgumentParser):
    """A mode's parser: what follows the first `--` goes to pytest on both sides unparsed, as
    `args.pytest_args`. argparse's own REMAINDER positional cannot do this after IMAGE: it
    would take every option given after IMAGE too."""

    @overload
    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...

    @overload
    def parse_known_args(self, args: Sequence[str] | None, namespace: N) -> tuple[N, list[str]]: ...

    @overload
    def parse_known_args(self, *, namespace: N) -> tuple[N, list[str]]: ...

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        cut = argv.index("--") if "--" in argv else len(argv)
        parsed, unknown = super().parse_known_args(argv[:cut], namespace)
        parsed.pytest_args = argv[cut + 1 :]
        return parsed, unknown


def add_mode(modes: Any, name: str, summary: str) -> ModeParser:
    """The mode's parser; its `--help` text is the docstring of its run function (MODES)."""
    parser: ModeParser = modes.add_parser(
        name,
        help=summary,
        description=inspect.getdoc(MODES[name]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"{PYTEST_ARGS}: passed to pytest on both sides",
    )
    return parser


def add_local_run_options(mode: argparse.ArgumentParser, ids_help: str) -> None:
    """The options of a mode that runs pytest on this machine (`patch`, `checkout`)."""
    mode.add_argument("--ids", type=listed_ids, metavar="ID,…", help=ids_help)
    mode.add_argument(
        "--results-dir", type=Path, help="both runs' results and the table (default: under runs/)"
    )
    mode.add_argument("--dry-run", action="store_true", help="print the ids, run nothing")
    add_profiles_option(mode)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "validate",
        help="run a change's affected serve ids without and with it, and the table of the two",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = parser.add_subparsers(
        dest="mode", required=True, metavar="MODE", parser_class=ModeParser
    )

    patch = add_mode(modes, "patch", "a patch to the installed ai-dynamo, run on this machine")
    patch.add_argument("patch", type=Path, metavar="FILE", help="the patch (site-packages paths)")
    add_local_run_options(
        patch,
        "the ids to run (default: those whose declared upstream defect is rooted in a "
        "file the patch touches)",
    )

    checkout = add_mode(modes, "checkout", "a Dynamo checkout at REF and now, run on this machine")
    checkout.add_argument("checkout", type=Path, metavar="PATH", help="a Dynamo checkout (git)")
    checkout.add_argument("--base", required=True, metavar="REF", help="the revision to compare")
    add_local_run_options(checkout, "the ids to run (default: the CPU-tier ids the change affects)")

    image = add_mode(modes, "image", "files of this repository changed in an image's checkout")
    image.add_argument("image", metavar="IMAGE", help="image holding the checkout at --workdir")
    image.add_argument(
        "--change",
        action="append",
        required=True,
        metavar="SRC[:DST]",
        help="changed file SRC replacing the repo path DST (default: SRC's own repo path)",
    )
    image.add_argument(
        "--ids", type=listed_ids, metavar="ID,…", help="a subset of the affected ids to run"
    )
    image.add_argument("--tier", choices=["cpu", "gpu"], help="default: gpu with --gpus, else cpu")
    add_container_options(image)
    add_profiles_option(image)

    for mode in (patch, checkout, image):
        usage = mode.format_usage().removeprefix("usage: ").rstrip()
        mode.usage = f"{usage} [{PYTEST_ARGS}]"
    return parser


@reports_user_errors
def run(args: argparse.Namespace) -> int:
    return MODES[args.mode](args)
