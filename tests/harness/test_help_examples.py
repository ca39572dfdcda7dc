"""Every `--help` example runs: each example line of each command parses with the real parser,
and every name it uses exists (a fault of the catalogue, a profile, a serve id, the image tag
the build script makes, a repository path a `--change` or a positional names)."""

from __future__ import annotations

import re
import shlex
from types import ModuleType

import pytest

from harness.cli.main import build_parser, subcommand_modules
from harness.core.paths import REPO_ROOT
from harness.launch.mutation import load_catalogue
from harness.profiles import load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
IDS = {p.test_id(c) for p in PROFILES for c in p.cases}
NAMES = {p.name for p in PROFILES}
FAULTS = {f.name for f in load_catalogue()}
BUILT_TAG = re.search(
    r"tag=\$\{1:-([^}]+)\}", (REPO_ROOT / "docker/build-cpu-image.sh").read_text()
)
PLACEHOLDERS = ("~/", "old/", "my_")  # the reader's own paths in an example


def examples(module: ModuleType) -> list[str]:
    """The example command lines (continuations joined, comments dropped)."""
    text = getattr(module, "EXAMPLES", "")
    joined = text.replace("\\\n", " ")
    return [
        line.split("  #")[0].strip()
        for line in joined.splitlines()
        if line.strip().startswith("serve-harness ")
    ]


CASES = [
    (m.__name__.rsplit(".", 1)[-1], line) for m in subcommand_modules() for line in examples(m)
]


def test_every_command_shows_examples() -> None:
    commands = {name for name, _ in CASES}
    assert len(CASES) >= 15 and {"mutate", "validate", "report", "docker", "list_cmd"} <= commands


@pytest.mark.parametrize(("command", "line"), CASES, ids=[line for _, line in CASES])
def test_each_example_parses_and_names_what_exists(command: str, line: str) -> None:
    words = shlex.split(line)[1:]
    args = build_parser().parse_args(words)  # SystemExit on a wrong flag or a missing argument
    assert args.run is not None
    missing = []
    for fault in getattr(args, "faults", None) or []:
        name = getattr(fault, "name", fault)
        missing += [f"fault {name}"] if name not in FAULTS else []
    ids = getattr(args, "ids", None) or []
    missing += [f"id {i}" for i in ids if i not in IDS]
    image = getattr(args, "image", None)
    built = BUILT_TAG.group(1) if BUILT_TAG else None
    if image is not None and image != built:
        missing.append(f"image {image} (docker/build-cpu-image.sh tags {built})")
    for value in words:
        if value.startswith(("launchers/", "profiles/", "docs/")) or ":launchers/" in value:
            path = value.split(":", 1)[-1]
            missing += [] if (REPO_ROOT / path).exists() else [f"path {path}"]
        elif re.fullmatch(r"(?:agg|e_pd|epd|p_d|pd)\w*_[\w.-]+", value) and "/" not in value:
            missing += [] if value in NAMES else [f"profile {value}"]
    assert not missing, f"{line}: {missing}"
