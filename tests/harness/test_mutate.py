"""`serve-harness mutate`: the catalogue holds against the installed Dynamo and our launchers,
bad entries are named, the verdicts follow the rows; and (heavy) two real faults caught with the
right cause and role, and an oracle broken on purpose to watch a fault escape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli.main import DEFAULT_PROFILES, profiles_in
from harness.cli.mutate import (
    CAUGHT,
    ESCAPED,
    MISNAMED,
    NO_RESULT,
    UNDETERMINED,
    check_ids,
    judge,
    site_of,
)
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import PYTHON_ONLY, DynamoSource
from harness.launch.launch_spec import choose_launcher
from harness.launch.mutation import CatalogueError, Fault, build_tree, load_catalogue

CATALOGUE = load_catalogue()
PROFILES = profiles_in(DEFAULT_PROFILES)


def test_the_catalogue_covers_both_stacks_and_eight_classes() -> None:
    assert len(CATALOGUE) >= 24
    assert len({f.fault_class for f in CATALOGUE}) >= 8
    assert {f.stack for f in CATALOGUE} == {"vllm", "sglang"}
    launchers = [f for f in CATALOGUE if not f.is_python]
    python = [f for f in CATALOGUE if f.is_python]
    assert {f.stack for f in launchers} == {f.stack for f in python} == {"vllm", "sglang"}


def test_every_fault_names_ids_that_run_its_file() -> None:
    check_ids(CATALOGUE, PROFILES)  # raises CliError naming the fault otherwise


@pytest.mark.parametrize("fault", CATALOGUE, ids=lambda f: f.name)
def test_every_fault_applies_to_what_is_installed(fault: Fault, tmp_path: Path) -> None:
    """The pattern is found once in the installed Dynamo or our launcher, and the faulty file
    still parses: a fault that cannot load would be caught for the wrong reason."""
    tree, not_applied = build_tree(fault, tmp_path, PROFILES, site_of(fault))
    assert not_applied is None, not_applied
    assert (tree / PYTHON_ONLY).is_file()
    if fault.is_python:
        target = tree / fault.file
        compile(target.read_text(), str(target), "exec")
        original = site_of(fault) / fault.site_path
        assert target.read_text() != original.read_text()
    else:
        done = subprocess.run(["bash", "-n", str(tree / "launchers")], capture_output=True)
        assert done.returncode in (0, 126, 1)  # a directory: bash -n on each script below
        for script in (tree / "launchers").rglob("*.sh"):
            check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            assert check.returncode == 0, f"{script}: {check.stderr}"


def test_a_built_tree_runs_its_own_copy_of_our_launchers(tmp_path: Path) -> None:
    fault = next(f for f in CATALOGUE if f.name == "vllm-e-pd-encoder-bypassed")
    tree, _ = build_tree(fault, tmp_path, PROFILES, site_of(fault))
    profile = next(p for p in PROFILES if p.name == "e_pd_qwen3-vl-2b")
    ours = REPO_ROOT / profile.launcher
    choice = choose_launcher(profile, profile.cases[0], ours, DynamoSource(tree))
    assert choice.origin == "ours" and choice.script == tree / profile.launcher
    assert "--route-to-encoder" not in choice.script.read_text().split("start_role pd")[1]
    assert "--route-to-encoder" in ours.read_text()  # the user's (our) tree is untouched


def test_a_pattern_the_code_no_longer_has_is_not_applicable(tmp_path: Path) -> None:
    fault = CATALOGUE[0].model_copy(update={"find": "no such text in any launcher"})
    _, not_applied = build_tree(fault, tmp_path, PROFILES, site_of(fault))
    assert not_applied == f"not applicable: pattern not found in {fault.file}"


def test_a_checkout_without_the_file_is_not_applicable(tmp_path: Path) -> None:
    checkout = tmp_path / "dynamo"
    (checkout / "components" / "src" / "dynamo").mkdir(parents=True)
    fault = next(f for f in CATALOGUE if f.file.startswith("examples/"))
    _, not_applied = build_tree(fault, tmp_path / "out", PROFILES, site_of(fault), checkout)
    assert not_applied == f"not applicable: no {fault.file} in the tree"


def test_a_bad_entry_is_named_with_its_field(tmp_path: Path) -> None:
    entry = yaml.safe_load((REPO_ROOT / "profiles" / "faults.yml").read_text())[0]
    entry["catch"] = {"causes": ["no_such_cause"]}
    bad = tmp_path / "faults.yml"
    bad.write_text(yaml.safe_dump([entry]))
    with pytest.raises(CatalogueError, match=rf"fault {entry['name']}: catch.causes.0"):
        load_catalogue(bad)


def row(test_id: str, outcome: str, cause: str | None = None, role: str | None = None) -> dict:
    return {"test_id": test_id, "outcome": outcome, "cause": cause, "role": role}


def test_verdicts_follow_the_cause_and_role_named() -> None:
    fault = next(f for f in CATALOGUE if f.name == "vllm-e-pd-encoder-bypassed")
    [tid] = fault.ids
    assert judge(fault, {tid: row(tid, "failed", "wrong_path", "encode")}, set())[0] == CAUGHT
    assert judge(fault, {tid: row(tid, "failed", "wrong_path", None)}, set())[0] == MISNAMED
    assert judge(fault, {tid: row(tid, "failed", "wrong_answer", "encode")}, set())[0] == MISNAMED
    assert judge(fault, {tid: row(tid, "passed")}, set())[0] == ESCAPED
    assert judge(fault, {}, set())[0] == NO_RESULT
    assert judge(fault, {tid: row(tid, "failed", "http_error")}, {tid})[0] == UNDETERMINED


def mutate(tmp_path: Path, faults: str, *extra: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "mutate", "--faults", faults, "--no-baseline",
         "--results-dir", str(tmp_path), *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def fault_row(tmp_path: Path, name: str, test_id: str) -> dict:
    rows = [json.loads(line) for line in (tmp_path / name / "results.jsonl").open()]
    return next(r for r in rows if r["test_id"] == test_id)


@pytest.mark.heavy
def test_a_launcher_fault_and_a_python_fault_are_caught_by_name(tmp_path: Path) -> None:
    """Real topologies: the E/PD launcher without --route-to-encoder (the path names the encode
    worker that served nothing) and Dynamo's vLLM handler reporting one prompt token short."""
    code, out = mutate(tmp_path, "vllm-e-pd-encoder-bypassed,vllm-usage-prompt-tokens-off-by-one")
    assert code == 0, out
    table = (tmp_path / "mutation.md").read_text()
    assert table.count("**caught**") == 2, table
    bypass = fault_row(tmp_path, "vllm-e-pd-encoder-bypassed", "mm_e_pd_qwen3-vl-2b")
    assert (bypass["cause"], bypass["role"]) == ("wrong_path", "encode")
    usage = fault_row(tmp_path, "vllm-usage-prompt-tokens-off-by-one", "mm_agg_qwen3-vl-2b")
    assert usage["cause"] == "wrong_answer" and "prompt_tokens" in usage["message"]


@pytest.mark.heavy
def test_an_oracle_broken_on_purpose_lets_its_fault_escape(tmp_path: Path) -> None:
    """The prompt-token oracle made to pass everything (tests/harness/oracle_broken_double.py):
    the usage fault it alone catches escapes, and mutate says so and exits 1."""
    plugin = ["--", "-p", "tests.harness.oracle_broken_double"]
    code, out = mutate(tmp_path, "vllm-usage-prompt-tokens-off-by-one", *plugin)
    assert code == 1, out
    assert "**escaped**" in (tmp_path / "mutation.md").read_text()
