"""`harness validate --dynamo-src PATH --base REF [--ids ID,…]`: the serve ids a change to a Dynamo
checkout affects, run on this machine's CPU tier twice: with the checkout as it was at REF and
as it is now (both its launchers and its Python, `--dynamo-src`), and the table of the two.

The seed's proof, for a maintainer's branch: the E/P/D launcher without its encode health line
at REF fails `no_health_source` naming encode, the branch passes. Exit status: the change's."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.cli.affected import changed_files
from harness.cli.change_map import affected
from harness.cli.common import CliError, profiles_in
from harness.cli.validate_local import render_sides, run_side, side_rows
from harness.core.paths import runs_dir
from harness.profiles import Profile
from harness.runtime.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError


def checkout_ids(profiles: list[Profile], files: list[str]) -> list[str]:
    """The CPU-tier ids the checkout's changed files affect (each runs the checkout's launcher
    where it holds it)."""
    return [c.test_id for c in affected(files, profiles, {}, ("cpu",), checkout=True).cases
            if "cpu" in c.cadence]  # fmt: skip


def base_tree(checkout: Path, base: str, out: Path) -> Path:
    """The checkout's tree at `base`, written to `out` (`git archive`, no worktree state)."""
    archive = subprocess.Popen(
        ["git", "-C", str(checkout), "archive", base], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(out)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise CliError(f"--base {base}: not a revision of {checkout}")
    return out


def run_checkout(args: argparse.Namespace) -> int:
    checkout = Path(args.dynamo_src).resolve()
    try:
        DynamoSource(checkout).check()
    except DynamoSourceError as exc:
        raise CliError(str(exc)) from None
    files = changed_files(args.base, checkout)
    ids = ([i.strip() for i in args.ids.split(",") if i.strip()] if args.ids
           else checkout_ids(profiles_in(args.profiles), files))  # fmt: skip
    if not ids:
        raise CliError(f"no CPU-tier serve case runs what changed since {args.base}: {files}")
    sides = (f"base {args.base}", "change")
    print(f"harness validate: {len(ids)} id(s), {checkout} at {args.base} vs now: "
          f"{', '.join(ids)}", file=sys.stderr)  # fmt: skip
    if args.dry_run:
        return 0
    extra = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    root = args.results_dir or runs_dir() / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    rows: dict[str, list[dict[str, Any]]] = {}
    runs: list[tuple[str, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="harness-dynamo-base-") as tmp:
        trees = {sides[0]: base_tree(checkout, args.base, Path(tmp)), sides[1]: checkout}
        for side in sides:
            env = {**os.environ, DYNAMO_SRC_ENV: str(trees[side])}
            out = root / side.replace(" ", "-")
            started = time.monotonic()
            code = run_side(side, ids, out, extra, env, strict=False)
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
    text = render_sides(heading, sides, rows, runs)
    root.mkdir(parents=True, exist_ok=True)
    (root / "validation.md").write_text(text + "\n")
    print(text)
    print(f"harness validate: table and both runs' results in {root}", file=sys.stderr)
    return runs[-1][1]
