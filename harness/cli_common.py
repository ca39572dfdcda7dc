"""What several subcommands share: the profiles directory option and loading profiles by name."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.paths import REPO_ROOT
from harness.profile import CaseSpec, Profile, load_profiles

DEFAULT_PROFILES = REPO_ROOT / "profiles"
DEFAULT_CASE = "default"


class CliError(Exception):
    """A user error a subcommand reports on stderr (exit 2) without a traceback."""


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


def profile_named(directory: Path, name: str) -> Profile:
    profiles = profiles_in(directory)
    for profile in profiles:
        if profile.name == name:
            return profile
    names = ", ".join(p.name for p in profiles)
    raise CliError(f"no profile named {name!r} in {directory}; profiles: {names}")


def case_named(profile: Profile, suffix: str | None) -> CaseSpec:
    """The case with this suffix; None or "default" means the case without a suffix (or the first)."""
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
