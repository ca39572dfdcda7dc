"""The serve ids a change affects, run twice (without the change, then with it), and the table
of the two runs in markdown, ready to paste into a PR description. Exit status: the run with
the change's. `serve-harness validate MODE --help` says what each mode's two runs are and which
ids it picks."""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

from harness.cli.affected import affected, changed_files
from harness.cli.docker import (
    add_container_options,
)
from harness.cli.main import (
    TIER_CHOICES,
    CliError,
    add_profiles_option,
    profiles_in,
)
from harness.cli.serve_runs import (
    Rows,
    Runs,
    listed_ids,
    render_sides,
    results_root,
    run_side,
    side_rows,
    tree_at,
    write_table,
)
from harness.cli.validate_image import run_image
from harness.cli.validate_patch import run_patch
from harness.launch.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError

ORDER = 80  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness validate checkout ~/dynamo --base origin/main
  serve-harness validate patch docs/patches/dynamo-1.6.1-encoder-dtype.patch \\
    --ids mm_epd_qwen3-vl-2b
  serve-harness validate image serve-harness/cpu:local \
    --change my_epd.sh:launchers/vllm/disagg_multimodal_epd.sh"""


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
        DynamoSource(checkout).with_runtime()
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
        f"serve-harness validate: {len(ids)} id(s), {checkout} at {args.base} vs now: "
        f"{', '.join(ids)}",
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
            rows[side] = side_rows(out / "results.jsonl", side, functools.partial(said, side))
    changed = ", ".join(f"`{f}`" for f in files) or "nothing"
    heading = [
        f"### Validation: {checkout.name} at {args.base} against its working tree",
        "",
        f"Changed: {changed}; every role runs the checkout's Python and, where a profile names "
        "one, its launcher (`--dynamo-src`).",
    ]
    write_table(render_sides(heading, sides, rows, runs), root)
    return runs[-1][1]


MODES: dict[str, Callable[[argparse.Namespace], int]] = {
    "patch": run_patch,
    "checkout": run_checkout,
    "image": run_image,
}
PYTEST_ARGS = "-- PYTEST_ARGS"
N = TypeVar("N")  # the namespace argparse fills


def said(side: str, _launcher: str) -> str:
    """A launcher cell of a side's table: the side's name (serve_runs.side_rows `mark`)."""
    return side


class ModeParser(argparse.ArgumentParser):
    """A mode's parser: what follows the first `--` goes to pytest on both sides unparsed, as
    `args.pytest_args`. argparse's own REMAINDER positional cannot do this after IMAGE: it
    would take every option given after IMAGE too."""

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...

    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: N) -> tuple[N, list[str]]: ...

    @overload
    def parse_known_args(self, *, namespace: N) -> tuple[N, list[str]]: ...

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
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


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
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
    image.add_argument(
        "--tier",
        choices=TIER_CHOICES,
        help="auto: this machine's tier; default: gpu with --gpus, else cpu",
    )
    add_container_options(image)
    add_profiles_option(image)

    for mode in (patch, checkout, image):
        usage = mode.format_usage().removeprefix("usage: ").rstrip()
        mode.usage = f"{usage} [{PYTEST_ARGS}]"
    return parser


def run(args: argparse.Namespace) -> int:
    return MODES[args.mode](args)
