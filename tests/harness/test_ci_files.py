"""The CI files users copy (docs/ci/*.yml) run the README's commands: every command line they
hold calls `scripts/serve-suite`, `scripts/serve-harness` or the engine-free report
(`python -m harness.cli.report`), with options that exist, marks the suite sets, and files this
repository holds; every job has a time limit, and a job that runs the suite keeps its per-role
logs when it fails. A broken name in one of them fails here before a user copies it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli.main import build_parser
from harness.core.paths import REPO_ROOT

CI = sorted((REPO_ROOT / "docs" / "ci").glob("*.yml"))
README = (REPO_ROOT / "README.md").read_text()
# the suite's own options (harness/plugin/options.py) and the pytest ones the files use
SUITE_OPTIONS = {
    *re.findall(
        r'addoption\(\s*"(--[a-z-]+)"', (REPO_ROOT / "harness/plugin/options.py").read_text()
    ),
    "-m",
    "-k",
    "-p",
    "--junitxml",
    "-n",
    "--dist",
}
MARKS = {
    "pre_merge",
    "post_merge",
    "nightly",
    "upstream",
    "vllm",
    "sglang",
    "cpu",
    "and",
    "or",
    "not",
}
PLACEHOLDER = re.compile(r"\$\{\{[^}]*\}\}|\$\{?\w+\}?|\$\([^)]*\)")


def commands(path: Path) -> list[str]:
    """Every shell command of the file's steps (GitHub) or scripts (GitLab), one per item."""
    data = yaml.safe_load(path.read_text())
    blocks: list[str] = []
    for job in (data.get("jobs") or {}).values():
        blocks += [str(step["run"]) for step in job.get("steps", []) if "run" in step]
    for job in data.values():
        if isinstance(job, dict) and "script" in job:
            blocks += [str(line) for line in job["script"]]
    out: list[str] = []
    for block in blocks:
        text = " ".join(line.strip() for line in block.splitlines())
        out += [part.strip() for part in re.split(r"&&|;|\bthen\b|\bfi\b", text)]
    return [part for part in out if part]


def calls(path: Path) -> list[list[str]]:
    """The calls of the harness's commands, placeholders put in for CI variables."""
    found = []
    lines = commands(path)
    lines += [inner for line in lines for inner in re.findall(r"\$\(([^)]*)\)", line)]
    for line in lines:
        line = PLACEHOLDER.sub("X", line)
        words = shlex.split(line)
        for i, word in enumerate(words):
            if word.endswith(("scripts/serve-suite", "scripts/serve-harness")) or (
                word == "harness.cli.report" and words[i - 1] == "-m"
            ):
                found.append(words[i:])
                break
    return found


def test_there_is_a_pull_request_file_and_a_gpu_file_and_a_gitlab_one() -> None:
    names = {p.name for p in CI}
    assert {"github-pr-cpu.yml", "gpu-serve-shards.yml", "gitlab-pr-cpu.yml"} <= names


@pytest.mark.parametrize("path", CI, ids=[p.name for p in CI])
def test_a_ci_file_runs_the_readmes_commands_with_names_that_exist(path: Path) -> None:
    found = calls(path)
    assert found, f"{path.name} runs none of the harness's commands"
    for call in found:
        program, args = call[0], call[1:]
        if program.endswith("scripts/serve-suite"):
            assert "scripts/serve-suite" in README
            options = [a for a in args if a.startswith("-")]
            unknown = [o for o in options if o.split("=")[0] not in SUITE_OPTIONS]
            assert not unknown, f"{path.name}: serve-suite {unknown} is no option of the suite"
            for i, arg in enumerate(args[:-1]):
                if arg == "-m":
                    words = set(re.findall(r"\w+", args[i + 1])) - {"X"}
                    assert words <= MARKS, f"{path.name}: marks {words - MARKS} are not set"
        elif program.endswith("scripts/serve-harness"):
            assert (REPO_ROOT / "scripts/serve-harness").is_file()
            build_parser().parse_args(args)  # SystemExit on a name the CLI does not have
        else:
            parser = build_parser()
            parser.parse_args(["report", *args])
    for rel in re.findall(r"(?:requirements|scripts)/[\w./-]+", path.read_text()):
        assert (REPO_ROOT / rel).exists(), f"{path.name} names {rel}, which is not here"


@pytest.mark.parametrize("path", CI, ids=[p.name for p in CI])
def test_every_job_has_a_time_limit_and_keeps_its_logs_on_failure(path: Path) -> None:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    jobs = data.get("jobs") or {k: v for k, v in data.items() if isinstance(v, dict)}
    for name, job in jobs.items():
        assert "timeout-minutes" in job or "timeout" in job, f"{path.name}: {name} has no limit"
        text = yaml.safe_dump(job)
        if "scripts/serve-suite" in text:
            keeps = (
                any(
                    s.get("if") == "failure()" and "runs/" in str(s.get("with", {}).get("path"))
                    for s in job.get("steps", [])
                )
                or job.get("artifacts", {}).get("when") == "always"
            )
            assert keeps, f"{path.name}: {name} keeps no per-role logs when it fails"
