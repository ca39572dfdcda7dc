"""The first commit of a Dynamo checkout's history whose serve ids fail as they fail at --bad,
found by bisection on this machine's CPU tier. Each step runs the serve suite on the
checkout's tree at one commit (its launchers and its Python, `--dynamo-src`, as `validate
checkout` runs them), exported to a temporary directory: the checkout, its index and working
tree are never touched.

The commit at --bad runs first; what fails there (id, cause, role) is the failure bisected. A
step is bad when one of those ids fails with the same cause and role, good when every id
passes; anything else (a commit that does not start, another cause, another role) is reported
and skipped, as `git bisect skip` would, never taken for good or bad. --good is taken as good,
as git bisect takes it. The commits walked are --bad's first-parent line back to --good (the
merges a post-merge job saw). Exit status: 0 with the first bad commit named, 1 when nothing
fails at --bad or skipped commits leave it ambiguous, 2 on bad input, 130 when interrupted."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cli.affected import affected, git_lines
from harness.cli.main import (
    DEFAULT_PROFILES,
    CliError,
    add_profiles_option,
    profiles_in,
)
from harness.cli.serve_runs import listed_ids, results_root, rows_by_id, run_side, tree_at
from harness.launch.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError

ORDER = 85  # after `validate` (80) in `serve-harness --help`

EXAMPLES = """examples:
  serve-harness bisect ~/dynamo --good v1.6.0 --bad main --ids mm_epd_qwen3-vl-2b"""

Failure = tuple[str | None, str | None]  # (cause, role)
Rows = dict[str, dict[str, Any]]  # test id -> its results row
BAD, GOOD, SKIP = "bad", "good", "skip"


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass
class Step:
    """One commit judged: its rows (results of the bisected ids), verdict and why."""

    commit: Commit
    rows: Rows
    verdict: str
    why: str
    wall_s: float
    out: Path

    def cell(self, test_id: str) -> str:
        row = self.rows.get(test_id)
        if row is None:
            return "no result"
        if row["outcome"] == "passed":
            return "passed"
        cause, role = failure_of(row)
        return f"{row['outcome']}: {cause or '-'}" + (f" ({role})" if role else "")

    def logs(self) -> str:
        dirs = [str(r["run_dir"]) for r in self.rows.values() if r.get("run_dir")]
        return ", ".join(dict.fromkeys(dirs)) or str(self.out)


@dataclass
class Bisection:
    """The history from --good (exclusive) to --bad (its last commit) and what was learnt."""

    commits: list[Commit]
    ids: list[str] = field(default_factory=list)
    signature: dict[str, Failure] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    good: int = -1  # index of the last commit known good (-1: --good itself)
    running: str | None = None  # the commit of the step in progress, for an interrupt
    bad: int = 0  # index of the first commit known bad
    skipped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.bad = len(self.commits) - 1

    def next_probe(self) -> int | None:
        """The middle of what is left, or the untried commit nearest to it when the middle was
        skipped; None when nothing is left to try."""
        middle = (self.good + self.bad) // 2
        for offset in range(self.bad - self.good):
            for index in (middle - offset, middle + offset):
                if self.good < index < self.bad and index not in self.skipped:
                    return index
        return None

    def record(self, index: int, step: Step) -> None:
        """A judged step: it moves the good or bad bound, or is skipped."""
        self.steps.append(step)
        if step.verdict == BAD:
            self.bad = index
        elif step.verdict == GOOD:
            self.good = index
        else:
            self.skipped.add(index)

    @property
    def found(self) -> bool:
        return self.bad - self.good == 1

    def suspects(self) -> list[Commit]:
        return self.commits[self.good + 1 : self.bad + 1]


def failure_of(row: dict[str, Any]) -> Failure:
    return row.get("cause"), row.get("role")


def judge(rows: Rows, signature: dict[str, Failure]) -> tuple[str, str]:
    """bad: an id fails as it did at --bad; good: every id passed; else skip, saying why."""
    same = [i for i in signature if i in rows and failed(rows[i])]
    same = [i for i in same if failure_of(rows[i]) == signature[i]]
    if same:
        return BAD, f"{', '.join(same)} failed as at --bad"
    if all(i in rows and rows[i]["outcome"] == "passed" for i in signature):
        return GOOD, "every id passed"
    other = []
    for test_id in signature:
        row = rows.get(test_id)
        if row is None:
            other.append(f"{test_id}: no result")
        elif row["outcome"] != "passed":
            cause, role = failure_of(row)
            other.append(f"{test_id}: {row['outcome']} {cause or ''} ({role or 'no role'})")
    return SKIP, "another failure: " + "; ".join(other)


def failed(row: dict[str, Any]) -> bool:
    return row["outcome"] in ("failed", "error")


def first_parent_line(checkout: Path, good: str, bad: str) -> list[Commit]:
    """--good's descendants on --bad's first-parent line, oldest first, --bad last."""
    for option, ref in (("--good", good), ("--bad", bad)):
        try:
            git_lines("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", repo=checkout)
        except CliError:
            raise CliError(f"{option} {ref}: not a commit of {checkout}") from None
    try:
        git_lines("merge-base", "--is-ancestor", good, bad, repo=checkout)
    except CliError:
        raise CliError(f"--good {good} is not an ancestor of --bad {bad} in {checkout}") from None
    lines = git_lines(
        "log",
        "--first-parent",
        "--ancestry-path",
        "--reverse",
        "--format=%H %s",
        f"{good}..{bad}",
        repo=checkout,
    )
    if not lines:
        raise CliError(f"no commit between --good {good} and --bad {bad} on {bad}'s first parents")
    return [Commit(*line.partition(" ")[::2]) for line in lines]


def changed_between(checkout: Path, good: str, bad: str) -> list[str]:
    return git_lines("diff", "--name-only", good, bad, repo=checkout)


def commit_files(checkout: Path, commit: Commit) -> list[str]:
    return git_lines("diff-tree", "--no-commit-id", "--name-only", "-r", commit.sha, repo=checkout)


class Runner:
    """Runs one step: the tree at a commit exported, the serve suite on it, the tree removed."""

    def __init__(self, checkout: Path, root: Path, pytest_args: list[str]) -> None:
        self.checkout = checkout
        self.root = root
        self.pytest_args = pytest_args

    def __call__(self, number: int, commit: Commit, ids: list[str]) -> Step:
        """The step, its verdict not yet given (rows: the results of `ids` only)."""
        out = self.root / f"step-{number}-{commit.short}"
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp:
            tree = tree_at(self.checkout, commit.sha, Path(tmp))
            env = {**os.environ, DYNAMO_SRC_ENV: str(tree)}
            label = f"step {number} at {commit.short}"
            code = run_side(label, ids, out, self.pytest_args, env, strict=False, tool="bisect")
        rows = rows_by_id(out / "results.jsonl", ids, f"step {number}")
        why = "" if rows else f"no result (the run exited {code}: docs/reference/exit-codes.md)"
        return Step(commit, rows, SKIP, why, time.monotonic() - started, out)


StepRun = Callable[[int, Commit, list[str]], Step]


def bisect(history: Bisection, run_step: StepRun, ids: list[str]) -> int:
    """Run --bad, then bisect what fails there; the exit status (0: found, 1: not)."""
    bad = history.commits[-1]
    say(f"serve-harness bisect: step 1, --bad {bad.short} ({bad.subject}): {', '.join(ids)}")
    history.running = f"--bad {bad.short} {bad.subject}"
    step = run_step(1, bad, ids)
    history.signature = {i: failure_of(r) for i, r in step.rows.items() if failed(r)}
    history.ids = sorted(history.signature) or ids
    history.steps.append(step)
    if not history.signature:
        missing = [i for i in ids if i not in step.rows]
        step.verdict = GOOD if not missing else SKIP
        step.why = f"no result for {', '.join(missing)}" if missing else "nothing fails here"
        return 1
    step.rows = {i: step.rows[i] for i in history.ids}
    step.verdict, step.why = BAD, "the failure bisected"
    while not history.found:
        index = history.next_probe()
        if index is None:
            return 1
        commit = history.commits[index]
        number = len(history.steps) + 1
        left = history.bad - history.good - 1
        say(f"serve-harness bisect: step {number}, {commit.short} ({commit.subject}); {left} left")
        history.running = f"{commit.short} {commit.subject}"
        step = run_step(number, commit, history.ids)
        step.verdict, why = judge(step.rows, history.signature)
        step.why = f"{why}; {step.why}" if step.why else why
        history.record(index, step)
        say(f"serve-harness bisect: {commit.short}: {step.verdict} ({step.why})")
    return 0


def render(
    history: Bisection,
    checkout: Path,
    good: str,
    bad: str,
    total_s: float,
    interrupted: str | None = None,
) -> str:
    """The result in markdown; `interrupted`: where a Ctrl-C stopped it."""
    ids = history.ids
    head = [
        f"### Bisect: {checkout.name} {good}..{bad} ({len(history.commits)} commit(s), "
        f"{len(history.steps)} step(s), {total_s:.0f} s)",
        "",
    ]
    if interrupted is not None:
        head += [f"**Interrupted** at {interrupted}.", ""]
    if not history.signature:
        if interrupted is None:
            head.append(
                f"Nothing fails at --bad on this tier ({', '.join(ids)}): nothing to bisect."
            )
    else:
        failures = "; ".join(
            f"{i}: {cause} ({role or 'no role'})" for i, (cause, role) in history.signature.items()
        )
        head.append(f"Bisected: {failures}.")
        head.append("")
        if history.found:
            first = history.commits[history.bad]
            files = ", ".join(f"`{f}`" for f in commit_files(checkout, first)) or "none"
            head.append(f"**First bad commit: {first.short} {first.subject}** (changed: {files})")
        else:
            suspects = ", ".join(f"{c.short} {c.subject}" for c in history.suspects())
            what = "so far" if interrupted else "**Not found**: skipped commits leave"
            head.append(f"{what} it is one of: {suspects}")
    table = [
        "",
        "| step | commit | subject | verdict | " + " | ".join(ids) + " | why | time | logs |",
        "|---" * (7 + len(ids)) + "|",
    ]
    for number, step in enumerate(history.steps, 1):
        cells = " | ".join(step.cell(i) for i in ids)
        table.append(
            f"| {number} | {step.commit.short} | {step.commit.subject} | {step.verdict} | "
            f"{cells} | {step.why} | {step.wall_s:.0f} s | {step.logs()} |"
        )
    return "\n".join(head + table)


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bisect",
        help="the first commit of a Dynamo checkout whose serve ids fail as at --bad (CPU tier)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkout", type=Path, metavar="PATH", help="a Dynamo checkout (git)")
    parser.add_argument("--good", required=True, metavar="REF", help="a revision that passes")
    parser.add_argument("--bad", required=True, metavar="REF", help="a revision that fails")
    parser.add_argument(
        "--ids",
        type=listed_ids,
        metavar="ID,…",
        help="the ids to run at --bad (default: the CPU-tier ids the range's changes affect); "
        "those failing there are bisected",
    )
    parser.add_argument(
        "--results-dir", type=Path, help="each step's results and the table (default: runs/)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commits and ids only")
    add_profiles_option(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    checkout = args.checkout.resolve()
    try:
        DynamoSource(checkout).with_runtime()
    except DynamoSourceError as exc:
        raise CliError(str(exc)) from None
    commits = first_parent_line(checkout, args.good, args.bad)
    ids = args.ids
    if not ids:
        files = changed_between(checkout, args.good, args.bad)
        ids = affected(files, profiles_in(args.profiles), tiers=("cpu",), checkout=True).ids("cpu")
    if not ids:
        raise CliError(f"no CPU-tier serve case runs what changed in {args.good}..{args.bad}")
    print(
        f"serve-harness bisect: {len(commits)} commit(s) after {args.good} up to {args.bad}; "
        f"id(s) at --bad: {', '.join(ids)}",
        file=sys.stderr,
    )
    if args.dry_run:
        return 0
    root = results_root(args, "bisect")
    extra = [] if args.profiles == DEFAULT_PROFILES else ["--profiles", str(args.profiles)]
    history = Bisection(commits)
    history.ids = ids
    started = time.monotonic()
    code, interrupted = 130, None
    try:
        code = bisect(history, Runner(checkout, root, extra), ids)
    except KeyboardInterrupt:
        interrupted = f"step {len(history.steps) + 1}, {history.running or 'between steps'}"
        say(f"serve-harness bisect: interrupted at {interrupted}; the steps before it follow")
    finally:
        took = time.monotonic() - started
        text = render(history, checkout, args.good, args.bad, took, interrupted)
        root.mkdir(parents=True, exist_ok=True)
        (root / "bisect.md").write_text(text + "\n")
        print(text)
        say(f"serve-harness bisect: table and every step's results in {root}")
    return code


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
