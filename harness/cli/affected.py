"""`python -m harness affected [--base REF | FILE…]`: the serve test ids a change affects, with
their cadence marks; warns when a changed launcher has no pre_merge coverage."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.cli.change_map import LAUNCHERS, AffectedReport, affected
from harness.cli.common import CliError, add_profiles_option, profiles_in, reports_user_errors
from harness.core.paths import REPO_ROOT
from harness.profiles import Tier
from harness.profiles.upstream import UPSTREAM_TAG, upstream_ids

SERVE_TEST = "tests/serve/test_serve.py::test_serve"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("affected", help="changed files -> serve test ids")
    parser.add_argument("files", nargs="*", help="changed files (default: from git)")
    parser.add_argument(
        "--base", help="git ref: files changed in REF...HEAD plus uncommitted and untracked ones"
    )
    parser.add_argument("--tier", choices=["cpu", "gpu"], help="only this tier's cadence")
    parser.add_argument("--nodeids", action="store_true", help="print pytest node ids only")
    parser.add_argument(
        "--dynamo-src",
        metavar="PATH",
        help="the changed files are this Dynamo checkout's (its launchers and Python): the ids "
        "that run them under --dynamo-src",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 3 when a changed launcher lacks pre_merge"
    )
    add_profiles_option(parser)
    return parser


def git_lines(*args: str, repo: Path = REPO_ROOT) -> list[str]:
    try:
        out = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise CliError(f"git -C {repo} {' '.join(args)} failed: {exc.stderr.strip()}") from None
    return [line for line in out.splitlines() if line]


def changed_files(base: str | None, repo: Path = REPO_ROOT) -> list[str]:
    """Committed since the merge base with `base` (if given), staged, unstaged and untracked,
    in this repository or a Dynamo checkout."""
    files = git_lines("diff", "--name-only", f"{base}...HEAD", repo=repo) if base else []
    files += git_lines("diff", "--name-only", "HEAD", repo=repo)
    files += git_lines("ls-files", "--others", "--exclude-standard", repo=repo)
    return list(dict.fromkeys(files))


def repo_relative(path: str) -> str:
    resolved = Path(path).resolve() if Path(path).exists() or Path(path).is_absolute() else None
    if resolved is None:
        return Path(path).as_posix().removeprefix("./")
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        raise CliError(f"{path} is outside the repository {REPO_ROOT}") from None


def launcher_texts() -> dict[str, str]:
    return {
        p.relative_to(REPO_ROOT).as_posix(): p.read_text(errors="replace")
        for p in (REPO_ROOT / LAUNCHERS).rglob("*")
        if p.is_file()
    }


def render(report: AffectedReport, nodeids: bool) -> str:
    if nodeids:
        return "\n".join(f"{SERVE_TEST}[{case.test_id}]" for case in report.cases)
    width = max((len(c.test_id) for c in report.cases), default=0)
    upstream = upstream_ids()
    lines = []
    for case in report.cases:
        cadence = "  ".join(
            f"{tier}: {','.join(marks) or '-'}" for tier, marks in case.cadence.items()
        )
        tag = f"  {UPSTREAM_TAG}" if case.test_id in upstream else ""
        lines.append(f"{case.test_id:<{width}}  {cadence or 'skipped on every tier'}{tag}")
    return "\n".join(lines)


@reports_user_errors
def run(args: argparse.Namespace) -> int:
    if args.files and args.base:
        raise CliError("give either --base REF or FILE…, not both")
    checkout = Path(args.dynamo_src).resolve() if args.dynamo_src else None
    if args.files:
        files = args.files if checkout else [repo_relative(f) for f in args.files]
    else:
        files = changed_files(args.base, checkout or REPO_ROOT)
    if not args.files and not args.base:
        print("affected: no --base given: uncommitted and untracked changes only", file=sys.stderr)
    tiers: tuple[Tier, ...] = (args.tier,) if args.tier else ("gpu", "cpu")
    report = affected(files, profiles_in(args.profiles), launcher_texts(), tiers, bool(checkout))
    text = render(report, args.nodeids)
    if text:
        print(text)
    print(f"affected: {len(files)} changed file(s) -> {len(report.cases)} serve case(s); "
          f"no serve case: {', '.join(report.unmapped) or '-'}", file=sys.stderr)  # fmt: skip
    for warning in report.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 3 if args.strict and report.warnings else 0
