"""The docs name only what exists: every repo path and relative link, every `serve-harness`
subcommand and the flags written after it, every profile, serve id and failure cause a page
names; and the reference pages made from the code are current. A page that names something
removed or renamed fails here, with page:line."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from harness.cli.reference_docs import stale_pages
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause
from harness.profiles import load_profiles
from harness.profiles.upstream import upstream_tests

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
GENERATED = {"docs/reference/upstream-parity.md"}  # checked against the code by their own tests
TOP_DIRS = ("harness", "tests", "scripts", "launchers", "profiles", "docs", "bench", "requirements")
TOP_DIRS += ("docker", ".ci")
REPO_PATH = re.compile(
    r"(?<![\w./:-])((?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w./-]*[\w/])"
)
# Paths of a Dynamo checkout (upstream's layout) the docs name beside ours: not this repo's.
UPSTREAM_PATHS = (
    "tests/serve/multimodal_profiles",
    "tests/serve/test_sglang.py",
    "tests/serve/test_trtllm.py",
    "tests/serve/test_vllm",
    "tests/serve/test_port_contract.py",
    "tests/serve/conftest.py",
    "tests/serve/common.py",
    "tests/serve/launch",
    "tests/utils/",
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`([^`]+)`")
PROFILE_LIKE = re.compile(r"^(?:sglang_)?(?:agg|e_pd|epd|p_d|pd)(?:_[a-z]+)*_[a-z]+[\w.-]*\d+b$")
# a serve id names a model family (`mm_device_do_normalize`, a vLLM function, is no id)
ID_LIKE = re.compile(r"^(?:mm|multimodal|video)_[\w.-]*(?:qwen|llava|gemma|phi|newfam)[\w.-]*$")


def lines_of(page: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(page.read_text().splitlines(), start=1)


def where(page: Path, number: int) -> str:
    return f"{page.relative_to(REPO_ROOT)}:{number}"


def parsers() -> dict[str, argparse.ArgumentParser]:
    """'serve-harness', 'serve-harness up', 'serve-harness validate checkout', ... -> parser."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(f"{name} {sub}", child)

    walk("serve-harness", build_parser())
    return found


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def missing_paths(page: Path) -> list[str]:
    out = []
    rel_page = page.relative_to(REPO_ROOT).as_posix()
    for number, line in lines_of(page):
        for match in REPO_PATH.finditer(line):
            path = match.group(1).rstrip(".")
            if any(c in path for c in "*<{") or (REPO_ROOT / path).exists():
                continue
            if path.startswith(UPSTREAM_PATHS):
                continue
            if rel_page in GENERATED:
                continue
            out.append(f"{where(page, number)}: no {path}")
        for match in LINK.finditer(line):
            target = match.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                out.append(f"{where(page, number)}: link to a missing {target}")
    return out


def wrong_commands(page: Path, known: dict[str, argparse.ArgumentParser]) -> list[str]:
    """`serve-harness X …`: X a subcommand (and a mode where it has them), each --flag after it
    one that command takes."""
    out = []
    for number, line in lines_of(page):
        spans = CODE.findall(line) + ([line.strip()] if line.startswith("    ") else [])
        for span in spans:
            if "serve-harness " not in span:
                continue
            try:
                words = shlex.split(span.split("serve-harness ", 1)[1].split("#")[0])
            except ValueError:
                continue
            name = "serve-harness"
            for word in words:
                if word.startswith("-") or f"{name} {word}" not in known:
                    break
                name = f"{name} {word}"
            if name == "serve-harness":
                if words and not words[0].startswith(("-", "COMMAND", "<", "…")):
                    out.append(f"{where(page, number)}: no subcommand {words[0]!r}")
                continue
            flags = flags_of(known[name])
            for word in words:
                flag = word.split("=", 1)[0]
                if word == "--":
                    break
                if flag.startswith("--") and flag not in flags and flag != "--help":
                    out.append(f"{where(page, number)}: {name} has no {flag}")
    return out


def unknown_names(page: Path, profiles: set[str], ids: set[str]) -> list[str]:
    out = []
    causes = {c.value for c in Cause}
    for number, line in lines_of(page):
        for span in CODE.findall(line):
            token = span.strip()
            if PROFILE_LIKE.match(token) and token not in profiles and token not in ids:
                out.append(f"{where(page, number)}: no profile {token}")
            elif ID_LIKE.match(token) and token not in ids and not token.endswith("…"):
                out.append(f"{where(page, number)}: no serve id {token}")
        if "cause" in line.lower() and page.name == "README.md":
            for span in CODE.findall(line):
                if re.fullmatch(r"[a-z]+(?:_[a-z]+)+", span) and span not in causes:
                    if span.endswith(("_s", "_id")):
                        continue
                    out.append(f"{where(page, number)}: no cause {span}")
    return out


def all_names() -> tuple[set[str], set[str]]:
    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    ours = {p.test_id(c) for p in profiles for c in p.cases}
    upstream = {t.id for t in upstream_tests()} | {t.here for t in upstream_tests() if t.here}
    return {p.name for p in profiles}, ours | upstream


def test_the_reference_pages_are_made_from_the_code() -> None:
    assert stale_pages() == [], "run: python -m harness.cli.reference_docs"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO_ROOT)) for p in PAGES])
def test_a_page_names_only_what_exists(page: Path) -> None:
    profiles, ids = all_names()
    problems = missing_paths(page) + wrong_commands(page, parsers())
    problems += unknown_names(page, profiles, ids)
    assert problems == []


def test_a_missing_subcommand_flag_path_or_id_is_caught(tmp_path: Path) -> None:
    page = REPO_ROOT / "docs" / "zz-broken-fixture.md"
    page.write_text(
        "Run `serve-harness frobnicate` and `serve-harness up agg_qwen3-vl-2b --nosuch`.\n"
        "See [the guide](how-to/nowhere.md) and harness/nowhere.py, profile `agg_nosuch-9b`,\n"
        "id `mm_agg_nosuch_qwen3-vl-2b`.\n"
    )
    try:
        profiles, ids = all_names()
        problems = missing_paths(page) + wrong_commands(page, parsers())
        problems += unknown_names(page, profiles, ids)
    finally:
        page.unlink()
    text = "\n".join(problems)
    assert "no subcommand 'frobnicate'" in text
    assert "serve-harness up has no --nosuch" in text
    assert "link to a missing how-to/nowhere.md" in text and "no harness/nowhere.py" in text
    assert "no profile agg_nosuch-9b" in text and "no serve id mm_agg_nosuch_qwen3-vl-2b" in text


def test_the_figures_the_readme_and_tutorial_quote_are_the_measured_ones() -> None:
    """A figure quoted on the first screen or in the tutorial is one docs/measurements.md
    records with its command: the README's `about N min` and case counts, the tutorial's exact
    times. A re-measured figure changed in one place only fails here."""
    measured = (REPO_ROOT / "docs" / "measurements.md").read_text()
    readme = (REPO_ROOT / "README.md").read_text().split("## What a failure looks like")[0]
    tutorial = (REPO_ROOT / "docs" / "tutorial.md").read_text()
    suite = next(line for line in measured.splitlines() if line.startswith("| serve suite, CPU"))
    newest = re.split(r"\b20\d\d-\d\d-\d\d\b", suite)[1]  # its newest measurement only
    for minutes in re.findall(
        r"suite\s+runs its \d+ cases in about (\d+) min|later run takes about (\d+) min", readme
    ):
        for figure in filter(None, minutes):
            assert re.search(rf"\b{figure} min \d+ s", newest), f"README: about {figure} min"
    for cases in re.findall(r"runs its (\d+) cases", readme):
        assert f"{cases} cases" in measured, f"README: {cases} cases"
    for exact in re.findall(r"\d+ min \d+ s", tutorial):
        assert exact in measured, f"tutorial: {exact} is not in docs/measurements.md"
