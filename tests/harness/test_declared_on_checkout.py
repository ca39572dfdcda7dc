"""Under --dynamo-src a checkout runs as it is (the installed Dynamo runs with the case's CPU
patch): a checkout that still has the defect fails the case in the defect's own words, and the
failure names the defect, its patch and how to run the case with it on a copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.loop import declared_on_checkout
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.launch.dynamo_src import DynamoSource
from harness.profiles import load_profiles
from harness.report.results import load_results
from tests.harness.dynamo_checkout import build_checkout

PROFILE = next(
    p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT) if p.name == "agg_gemma4-e2b-it"
)
UUID = next(c for c in PROFILE.cases if c.suffix == "uuid_passthrough")
# the own words the harness quotes from the worker (topology/own_words.py), as the seed saw them
WORDS = (
    "HTTP 503 on request 3; role 'worker' logged: AssertionError: Torch not compiled with CUDA "
    "enabled (cuda/__init__.py:403, in _lazy_init)"
)


def failure(message: str = WORDS) -> TopologyFailure:
    return TopologyFailure(Cause.HTTP_ERROR, message, Evidence(role="worker"))


def test_the_defects_own_words_on_a_checkout_name_it_and_its_patch(tmp_path: Path) -> None:
    sc = ServeCase(PROFILE, UUID, "cpu", source=DynamoSource(tmp_path))
    named = declared_on_checkout(sc, failure())
    assert named is not None
    print(f"\n{named.message}")
    assert named.cause == Cause.HTTP_ERROR and named.evidence.role == "worker"
    assert named.message.startswith("declared upstream defect holds on the checkout (")
    assert "docs/patches/dynamo-1.6.1-embedding-cache-device.patch" in named.message
    assert "test-your-dynamo-branch.md#a-declared-defect-your-checkout-still-has" in named.message
    assert named.message.endswith(WORDS)
    anchor = "## A declared defect your checkout still has"
    assert anchor in (REPO_ROOT / "docs/how-to/test-your-dynamo-branch.md").read_text()


def test_other_words_or_the_installed_dynamo_are_left_as_they_are(tmp_path: Path) -> None:
    on_checkout = ServeCase(PROFILE, UUID, "cpu", source=DynamoSource(tmp_path))
    assert declared_on_checkout(on_checkout, failure("HTTP 503; RuntimeError: other")) is None
    assert declared_on_checkout(ServeCase(PROFILE, UUID, "cpu"), failure()) is None


@pytest.mark.heavy
@pytest.mark.vllm
def test_a_checkout_with_the_defect_fails_the_case_named_as_it(tmp_path: Path) -> None:
    """The real thing: a checkout in upstream's layout whose Python still has the connector's
    device defect, the uuid case on its own launcher. The worker's engine dies in the defect's
    words; whether the harness sees the request's 503 first or the roles going down (the
    launcher's exit trap stops the frontend with the worker, and records no exit order: named
    by test_own_words.py's checkout_trap case), the worker is named, in its words, and the
    failure as the declared defect."""
    root = build_checkout(tmp_path / "dynamo", shapes=True)
    results = tmp_path / "results.jsonl"
    test_id = PROFILE.test_id(UUID)
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "tests/serve", "-p", "no:cacheprovider", "-q"),
            *("--tier", "cpu", "--dynamo-src", str(root), "--ids", test_id),
            *("--results", str(results)),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    row = {r["test_id"]: r for r in load_results(results)}[test_id]
    message = row["message"]
    print(f"\n{message}")
    assert row["outcome"] == "failed", message + run.stdout[-3000:]
    assert row["role"] == "worker", message
    assert message.startswith("declared upstream defect holds on the checkout ("), message
    assert "AssertionError: Torch not compiled with CUDA enabled" in message, message
