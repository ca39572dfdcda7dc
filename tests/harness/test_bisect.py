"""`serve-harness bisect PATH --good REF --bad REF`: a checkout history in upstream's layout,
bisected on the CPU tier to the commit that dropped the E/PD encode worker's health line, with a
later commit that breaks something else reported as another failure and skipped."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from harness.cli.bisect import BAD, GOOD, SKIP, Bisection, Commit, judge
from harness.cli.main import main
from harness.core.paths import REPO_ROOT
from tests.harness.dynamo_checkout import build_checkout, commit_all, write_launcher
from tests.harness.upstream_shapes import vllm_e_pd

E_PD = "examples/backends/vllm/launch/disagg_multimodal_e_pd.sh"
E_PD_ID = "mm_e_pd_qwen3-vl-2b"
CHECKOUT_PROFILES = REPO_ROOT / "tests" / "harness" / "profiles" / "checkout"
PD_WORKER = "python -m dynamo.vllm --route-to-encoder"
NO_SUCH_MODULE = "python -m dynamo.vllm_pd --route-to-encoder"


def history(tmp_path: Path) -> tuple[Path, list[str]]:
    """8 commits: C0 good; C2 drops the encode worker's health line (the first bad); C3 starts
    the PD worker through a module that does not exist (another failure), C4 puts it back; the
    rest touch docs. Returns the checkout and its commits' subjects, oldest first."""
    checkout = build_checkout(tmp_path / "dynamo")
    healthy, unhealthy = vllm_e_pd(health_source=True), vllm_e_pd(health_source=False)
    assert unhealthy.count(PD_WORKER) == 1
    steps = [
        ("E/PD launcher with its encode health source", healthy),
        ("docs: the E/PD recipe", None),
        ("e_pd: the encode worker's env in one place (drops its health line)", unhealthy),
        ("e_pd: the PD worker by its own module", unhealthy.replace(PD_WORKER, NO_SUCH_MODULE)),
        ("e_pd: back to dynamo.vllm for the PD worker", unhealthy),
        ("docs: ports", None),
        ("docs: troubleshooting", None),
        ("docs: changelog", None),
    ]
    for number, (subject, launcher) in enumerate(steps):
        if launcher is not None:
            write_launcher(checkout, launcher, E_PD)
        else:
            (checkout / "docs.md").write_text(f"revision {number}\n")
        commit_all(checkout, subject)
    return checkout, [subject for subject, _ in steps]


def sha(checkout: Path, rev: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_probe_order_and_the_verdicts() -> None:
    commits = [Commit(f"{i:040d}", f"c{i}") for i in range(7)]
    walk = Bisection(commits)
    assert walk.next_probe() == 2  # between --good (-1) and --bad (6)
    walk.skipped.add(2)
    assert walk.next_probe() == 1  # the nearest untried commit, below first
    walk.skipped.add(1)
    assert walk.next_probe() == 3
    walk.bad, walk.skipped = 2, {0, 1}
    assert walk.next_probe() is None and not walk.found
    assert [c.subject for c in walk.suspects()] == ["c0", "c1", "c2"]

    signature = {"a": ("no_health_source", "encode")}
    fails = {"outcome": "failed", "cause": "no_health_source", "role": "encode"}
    assert judge({"a": fails}, signature)[0] == BAD
    assert judge({"a": {"outcome": "passed"}}, signature)[0] == GOOD
    other_role = {**fails, "role": "pd"}
    verdict, why = judge({"a": other_role}, signature)
    assert verdict == SKIP and "(pd)" in why, why
    assert judge({}, signature) == (SKIP, "another failure: a: no result")


def test_bad_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout, _ = history(tmp_path)
    assert main(["bisect", str(checkout), "--good", "HEAD~7", "--bad", "HEAD", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "7 commit(s) after HEAD~7 up to HEAD" in err and E_PD_ID in err, err
    assert main(["bisect", str(checkout), "--good", "HEAD", "--bad", "HEAD~3"]) == 2
    assert "--good HEAD is not an ancestor of --bad HEAD~3" in capsys.readouterr().err
    assert main(["bisect", str(checkout), "--good", "nope", "--bad", "HEAD"]) == 2
    assert "--good nope: not a commit of" in capsys.readouterr().err
    assert main(["bisect", str(tmp_path), "--good", "HEAD~1", "--bad", "HEAD"]) == 2
    assert "no components/src/dynamo" in capsys.readouterr().err
    before = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert before == ""


@pytest.mark.heavy
@pytest.mark.vllm
def test_bisect_names_the_commit_that_dropped_the_health_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkout, subjects = history(tmp_path)
    head = sha(checkout, "HEAD")
    started = time.monotonic()
    code = main(
        [
            *("bisect", str(checkout), "--good", "HEAD~7", "--bad", "HEAD"),
            *("--profiles", str(CHECKOUT_PROFILES), "--results-dir", str(tmp_path / "out")),
        ]
    )
    took = time.monotonic() - started
    table = capsys.readouterr().out
    print(f"\n{table}\n(bisect took {took:.0f} s)")
    assert code == 0, table
    first_bad = sha(checkout, "HEAD~5")
    assert f"**First bad commit: {first_bad[:12]} {subjects[2]}**" in table, table
    assert f"`{E_PD}`" in table
    rows = {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| ")}
    assert f"{E_PD_ID}: no_health_source (encode)" in table
    assert "| bad |" in rows[head[:12]]
    assert "| skip |" in rows[sha(checkout, "HEAD~4")[:12]]  # the PD worker that cannot start
    assert "another failure" in rows[sha(checkout, "HEAD~4")[:12]]
    assert "| good |" in rows[sha(checkout, "HEAD~6")[:12]]
    assert "| bad |" in rows[first_bad[:12]]
    assert (tmp_path / "out" / "bisect.md").read_text().strip() == table.strip()
    status = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True, text=True
    )
    assert status.stdout == "" and sha(checkout, "HEAD") == head  # the checkout untouched
