"""The serve suite run on this machine against one Dynamo tree (its launchers and Python through
`--dynamo-src`), and its results read back: what `validate` and `bisect` share."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.cli.main import CliError
from harness.core.paths import REPO_ROOT, runs_dir
from harness.report.render import compare_table, validation_table
from harness.report.results import ResultsFileError, load_results
from harness.topology.processes import handling, term_raises_interrupt

SERVE_TESTS = "tests/serve"
MESSAGE_CHARS = 160  # a cause message's first sentence ("worker 'encode' (port N) reports …")
Rows = dict[str, list[dict[str, Any]]]  # side -> its results rows
Runs = list[tuple[str, int, float]]  # (side, exit status, wall seconds), in run order


def listed_ids(text: str) -> list[str]:
    """`--ids a, b` -> ["a", "b"]."""
    return [i.strip() for i in text.split(",") if i.strip()]


def results_root(args: argparse.Namespace, command: str) -> Path:
    """`--results-dir`, else a new `runs/<command>-<time>/`."""
    return args.results_dir or runs_dir() / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"


def first_sentence(message: str) -> str:
    line = message.splitlines()[0]
    end = line.find(". ")
    text = line[: end + 1] if end >= 0 else line
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def side_rows(
    results: Path, side: str, mark: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """One side's results, each launcher cell saying which copy ran (`mark(launcher)`, default
    "<side> Dynamo"), each cause cell what was seen, and a baseline's id marked as one (run for
    a selected id's comparison); a run that wrote nothing gives none."""
    if not results.is_file():
        return []
    try:
        rows = load_results(results)
    except ResultsFileError as exc:
        raise CliError(f"{side} run: {exc}") from None
    for row in rows:
        if row.get("baseline"):  # pulled in for a selected id's comparison, not selected itself
            row["test_id"] = f"{row['test_id']} (baseline)"
        row["launcher"] = (
            f"{row['launcher']} ({mark(row['launcher']) if mark else side + ' Dynamo'})"
        )
        if row["cause"] and row.get("message"):
            row["cause"] = f"{row['cause']}: {first_sentence(row['message'])}"
    return rows


def rows_by_id(results: Path, ids: list[str], label: str) -> dict[str, dict[str, Any]]:
    """A run's results of exactly these ids, by id (none where the run wrote no file)."""
    try:
        rows = {r["test_id"]: r for r in load_results(results)} if results.is_file() else {}
    except ResultsFileError as exc:
        raise CliError(f"{label}: {exc}") from None
    return {i: r for i, r in rows.items() if i in ids}


def run_side(
    side: str,
    ids: list[str],
    out: Path,
    extra: list[str],
    env: dict[str, str],
    strict: bool = True,
    tool: str = "validate",
) -> int:
    """One side on this machine: the serve suite on exactly these ids (their baselines pulled
    in), on the CPU tier, its results under `out`."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        SERVE_TESTS,
        "--tier",
        "cpu",
        *(["--strict-defects"] if strict else []),
        "--ids",
        ",".join(ids),
        "--results",
        str(out / "results.jsonl"),
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    print(f"serve-harness {tool}: {side} run: {' '.join(command)}", file=sys.stderr, flush=True)
    try:  # the run's output on stderr (stdout is the table); inherited where it is no file
        err: int | None = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        err = None
    code = run_to_the_end(command, env, err)
    return PYTEST_CODES.get(code, code)


# pytest's exit codes as serve-harness's (docs/reference/exit-codes.md): interrupted -> 130, an
# internal error -> 1, a usage error or nothing selected -> 2 (bad input)
PYTEST_CODES = {2: 130, 3: 1, 4: 2, 5: 2}


def run_to_the_end(command: list[str], env: dict[str, str], err: int | None) -> int:
    """Run pytest in its own process group, so that an interrupt reaches it exactly once, from
    here: Ctrl-C or SIGTERM to this process is passed on as one SIGINT and its teardown is
    waited for (a second SIGINT, or `subprocess.run`'s kill, would cut the teardown short and
    leave its topology running); then KeyboardInterrupt is raised here."""
    restore = term_raises_interrupt()
    try:
        proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=err,
            stderr=err,
            process_group=0,
            preexec_fn=interruptible,
        )
        try:
            return proc.wait()
        except KeyboardInterrupt:
            with handling(signal.SIG_IGN):
                proc.send_signal(signal.SIGINT)
                proc.wait()
            raise
    finally:
        restore()


def interruptible() -> None:
    """In the child, before it runs: SIGINT back to its default. A run started in the
    background by a shell without job control inherits SIGINT ignored, and would never hear
    the one this process passes on (measured: `mutate` under nohup kept running)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tree_at(checkout: Path, rev: str, out: Path) -> Path:
    """The checkout's tree at `rev`, written to `out` (`git archive`: the checkout, its index
    and its working tree are not touched; no worktree is registered)."""
    archive = subprocess.Popen(["git", "-C", str(checkout), "archive", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(out)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise CliError(f"{rev}: not a revision of {checkout}")
    return out


# What every `validate` mode shares: its two runs' results, one table of them.


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
    print(f"serve-harness validate: table and both runs' results in {root}", file=sys.stderr)
