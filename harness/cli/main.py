"""What several subcommands share: the profiles directory option and loading profiles by name.

`python -m harness SUBCOMMAND …`: a subcommand is one module of this package defining
`add_parser(subparsers)` and `run(args) -> int`; `build_parser` finds them, so adding one is
adding one file. Its `ORDER: int` places it in `--help`, which lists the tools in the order one
reaches for them (check the machine, list, bring one up, …) rather than by name; a module
without `ORDER` comes last. Helper modules (this one) define neither function and are skipped."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from harness.core.paths import REPO_ROOT
from harness.core.settings import EdgeSettings
from harness.profiles import CaseSpec, Profile, ProfileError, Tier, load_profiles

DEFAULT_PROFILES = REPO_ROOT / "profiles"
DEFAULT_CASE = "default"


class CliError(Exception):
    """A user error a subcommand reports on stderr (exit 2) without a traceback."""


TIER_CHOICES = ("auto", "cpu", "gpu")


def add_tier_option(parser: argparse.ArgumentParser, all_by_default: bool = False) -> None:
    """`--tier {auto,cpu,gpu}`, one choice set for every subcommand: auto is this machine's tier
    (GPU when NVML sees a device; HARNESS_TIER overrides); `all_by_default`: no flag means both
    tiers (list, affected)."""
    default = None if all_by_default else "auto"
    both = "; default: both tiers" if all_by_default else "; default: auto"
    parser.add_argument(
        "--tier",
        choices=TIER_CHOICES,
        default=default,
        help=f"auto: this machine's tier (GPU when NVML sees one, else CPU){both}",
    )


def tier_chosen(value: str | None) -> Tier | None:
    """The tier a --tier value names (auto: this machine's); None stays None (both tiers)."""
    from harness.machine.tier import detect_tier

    return None if value is None else detect_tier(EdgeSettings.of(os.environ).tier_asked(value))


def add_profiles_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profiles", type=Path, default=DEFAULT_PROFILES, help="profiles directory (%(default)s)"
    )


def profiles_in(directory: Path) -> list[Profile]:
    """Every profile under `directory`; a missing or empty directory is a user error."""
    if not directory.is_dir():
        raise CliError(f"--profiles: no such directory {directory}")
    profiles = load_profiles(directory, REPO_ROOT)
    if not profiles:
        raise CliError(f"--profiles: no *.yaml profiles under {directory}")
    return profiles


def profile_key(profile: Profile, directory: Path) -> str:
    """A profile's path under the profiles directory, without .yaml: 'vllm/agg_qwen3-vl-2b'."""
    source = Path(profile.source)
    try:
        return source.relative_to(directory).with_suffix("").as_posix()
    except ValueError:
        return source.stem


def profile_named(directory: Path, name: str) -> Profile:
    """By name, or by path under the profiles directory when names repeat across stacks."""
    profiles = profiles_in(directory)
    wanted = name.removesuffix(".yaml").removeprefix("profiles/")
    by_key = [p for p in profiles if profile_key(p, directory) == wanted]
    matches = by_key or [p for p in profiles if p.name == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        keys = ", ".join(profile_key(p, directory) for p in matches)
        raise CliError(f"profile name {name!r} is ambiguous; give one of: {keys}")
    names = ", ".join(sorted({p.name for p in profiles}))
    raise CliError(f"no profile named {name!r} in {directory}; profiles: {names}")


def case_named(profile: Profile, suffix: str | None) -> CaseSpec:
    """The case with this suffix; None or "default": the case without a suffix (else the first)."""
    wanted = "" if suffix in (None, DEFAULT_CASE) else suffix
    for case in profile.cases:
        if case.suffix == wanted:
            return case
    if suffix is None:
        return profile.cases[0]
    suffixes = ", ".join(c.suffix or DEFAULT_CASE for c in profile.cases)
    raise CliError(
        f"{profile.source}: profile {profile.name} has no case {suffix!r}; cases: {suffixes}"
    )


EXIT_CODES = """exit codes:
  0    done; every check or case passed
  1    a check, audit finding, validation or case failed
  2    bad input: a profile, option, file or field (named on stderr)
  130  interrupted (Ctrl-C)
  141  stdout closed early (`… | head`)
scripts/serve-suite and scripts/self-test return pytest's: docs/reference/exit-codes.md"""


def subcommand_modules() -> list[ModuleType]:
    """The modules of this package that define `add_parser` and `run`, by `ORDER` then name."""
    package = importlib.import_module(__name__.rpartition(".")[0])
    modules = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if callable(getattr(module, "add_parser", None)) and callable(getattr(module, "run", None)):
            modules.append(module)
    return sorted(modules, key=lambda m: (getattr(m, "ORDER", sys.maxsize), m.__name__))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="serve-harness",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_CODES,
        description="Tools around the serve suite; `serve-harness COMMAND --help` says more. "
        "`scripts/serve-harness` runs it on a fresh machine (it sets up first); `python -m "
        "harness` in the venv is the same command.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {}
    for module in subcommand_modules():
        sub = module.add_parser(subparsers)
        sub.set_defaults(run=module.run)
        helps[sub.prog] = (sub, getattr(module, "EXAMPLES", ""))
    for action in subparsers._choices_actions:  # each subcommand's one-line help
        sub, examples = helps[f"{parser.prog} {action.dest}"]
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
        said = action.help or ""
        sub.description = sub.description or f"{said[:1].upper()}{said[1:]}."
        sub.epilog = "\n\n".join(part for part in (sub.epilog, examples, EXIT_CODES) if part)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (CliError, ProfileError) as exc:  # every subcommand's user errors: one line, exit 2
        print(f"serve-harness {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `… | head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
