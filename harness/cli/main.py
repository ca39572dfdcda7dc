"""`python -m harness SUBCOMMAND …`: each subcommand lives in its own `harness/cli/<name>.py`
module exposing `add_parser(subparsers)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from harness.cli.common import CliError
from harness.profiles import ProfileError

SUBCOMMANDS = ("check", "list", "up", "audit", "affected", "report", "docker", "validate")
# `list` is a builtin's name, so its module is `list_cmd`.
MODULES = {"list": "list_cmd"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="Tools around the serve suite: check this machine, list profiles, bring one "
        "topology up, audit launchers without starting engines, map changed files to tests, "
        "render reports, run the suite in a docker image, validate a change in one.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"harness.cli.{MODULES.get(name, name)}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (CliError, ProfileError) as exc:
        print(f"harness {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `… | head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
