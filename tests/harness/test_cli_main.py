"""`serve-harness`: its subcommands are the modules of harness/cli that define `add_parser` and
`run`, found rather than listed, so a new subcommand is one new file; each one's `--help` works."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness.cli
from harness.cli.main import EXIT_CODES, build_parser, main, subcommand_modules

# Today's order in `serve-harness --help`: the order one reaches for them.
COMMANDS = [
    "check",
    "list",
    "up",
    "audit",
    "affected",
    "report",
    "docker",
    "validate",
    "bisect",
    "mutate",
]
VALIDATE_MODES = ["patch", "checkout", "image"]


def commands(parser: argparse.ArgumentParser) -> list[str]:
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subparsers.choices)


def test_every_module_with_add_parser_and_run_is_a_subcommand_in_order() -> None:
    names = [info.name for info in pkgutil.iter_modules(harness.cli.__path__)]
    modules = [importlib.import_module(f"harness.cli.{name}") for name in names]
    with_both = {m for m in modules if hasattr(m, "add_parser") and hasattr(m, "run")}
    assert set(subcommand_modules()) == with_both
    assert "harness.cli.main" not in {m.__name__ for m in with_both}  # a helper: skipped
    assert commands(build_parser()) == COMMANDS


@pytest.fixture
def extra_module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A second directory of harness.cli, for modules this test adds; removed after."""
    monkeypatch.setattr(harness.cli, "__path__", [*harness.cli.__path__, str(tmp_path)])
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("harness.cli.zz_")]:
        del sys.modules[name]


def test_one_new_file_is_one_new_subcommand(
    extra_module_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (extra_module_dir / "zz_hello.py").write_text(
        "def add_parser(subparsers):\n"
        "    return subparsers.add_parser('hello', help='say hello')\n\n"
        "def run(args):\n"
        "    print('hello')\n"
        "    return 0\n"
    )
    (extra_module_dir / "zz_helper.py").write_text("def add_parser(subparsers):\n    pass\n")
    assert commands(build_parser()) == [*COMMANDS, "hello"]  # no ORDER: last
    assert main(["hello"]) == 0
    assert capsys.readouterr().out == "hello\n"


@pytest.mark.parametrize(
    "argv",
    [[], *([c] for c in COMMANDS), *(["validate", m] for m in VALIDATE_MODES)],
    ids=lambda argv: " ".join(argv) or "serve-harness",
)
def test_every_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: serve-harness {' '.join(argv)}".rstrip())
    if not argv:
        assert EXIT_CODES in out


def test_every_subcommand_says_what_it_does_an_example_and_its_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One convention: a description, an example and the exit codes in each `--help`; one
    `--tier` choice set wherever a subcommand takes a tier."""
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "examples:" in out and f"serve-harness {command}" in out.split("examples:")[1]
        assert "exit codes:" in out and "2    bad input" in out
        description = out.split("\n\n")[1]
        assert description and not description.startswith(("options:", "positional")), command
        if "--tier" in out:
            assert "--tier {auto,cpu,gpu}" in out, command


def test_bad_input_is_one_line_naming_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve-harness audit: no profile named 'nosuch'") and err.count("\n") == 1
    assert main(["up", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("serve-harness up: no profile named 'nosuch'")
