"""A launch that fails to start with a known transient start-up failure is started again, and
says so; one that fails any other way, or on a tier whose table lists nothing, is not. Real
processes: a Dynamo frontend and a worker that fails its first start only
(tests/harness/launchers/mocker_topology.sh --fail-first-start)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cases.pool import TopologyPool
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import Tier
from harness.topology.transient import TRANSIENT_STARTS, TransientStart, transient
from tests.harness.faults import fault_profile

LISTED = "Engine core initialization failed. See root cause above."
# the table under test: the GPU tier's line, made to apply on the CPU tier
ON_CPU = (TransientStart(re.compile(r"Engine core initialization failed"), ("cpu",), "this test"),)


def first_start_fails(tmp_path: Path, message: str) -> tuple[LaunchSpec, Path]:
    marker = tmp_path / "failed-once"
    profile = fault_profile("mocker", ["--fail-first-start", str(marker), message])
    return LaunchSpec.of(profile, "cpu", profile.cases[0]), marker


def test_a_listed_start_up_failure_is_started_again_and_named(tmp_path: Path) -> None:
    spec, marker = first_start_fails(tmp_path, LISTED)
    said: list[str] = []
    with TopologyPool(lambda sig: [], say=said.append, transients=ON_CPU) as pool:
        topo = pool.get(spec)
        assert topo.ready_s is not None
        assert marker.exists()
        (why,) = pool.retries[spec.signature]
    print(f"\n{why}")
    assert why.startswith("start 1 failed role_exited (")
    assert f"RuntimeError: {LISTED}" in why and "this test" in why
    assert any(line.endswith("started again") for line in said)


@pytest.mark.parametrize(
    ("message", "table"),
    [
        ("CUDA error: an illegal memory access was encountered", ON_CPU),  # not listed
        (LISTED, TRANSIENT_STARTS),  # listed for the GPU tier only: the CPU tier retries nothing
    ],
    ids=["unlisted_line", "cpu_tier"],
)
def test_any_other_start_up_failure_is_not_started_again(
    tmp_path: Path, message: str, table: tuple[TransientStart, ...]
) -> None:
    spec, _ = first_start_fails(tmp_path, message)
    with TopologyPool(lambda sig: [], transients=table) as pool:
        with pytest.raises(TopologyFailure) as failed:
            pool.get(spec)
        assert failed.value.cause == Cause.ROLE_EXITED
        assert message in failed.value.message
        assert not pool.retries


def exited(code: int, cause: Cause = Cause.ROLE_EXITED) -> TopologyFailure:
    return TopologyFailure(cause, "role 'decode' exited", Evidence(role="decode", exit_code=code))


@pytest.mark.parametrize(
    ("failure", "logs", "tier", "listed"),
    [
        (exited(1), "ERROR Error in memory profiling: ...", "gpu", True),
        # seen in healthy runs too: counts only with the role's exit
        (exited(1), "Free memory on device (70.1/79.2 GiB) ...", "gpu", True),
        (
            TopologyFailure(Cause.PHASE_TIMEOUT, "not ready"),
            "Free memory on device",
            "gpu",
            False,
        ),
        (exited(-9), "", "gpu", True),
        (exited(137), "", "gpu", True),
        (exited(1), "", "gpu", False),
        (exited(-9), "", "cpu", False),
        # the faults the suite names are never retried, whatever the logs say
        (exited(1, Cause.NO_HEALTH_SOURCE), "Error in memory profiling", "gpu", False),
        (exited(1, Cause.NEVER_REGISTERED), "Error in memory profiling", "gpu", False),
    ],
    ids=[
        "memory_profiling",
        "free_memory_with_exit",
        "free_memory_alone",
        "killed",
        "killed_as_a_shell_says",
        "plain_exit",
        "cpu_tier",
        "no_health_source",
        "never_registered",
    ],
)
def test_the_table_lists_what_upstream_retries_and_nothing_the_suite_names(
    failure: TopologyFailure, logs: str, tier: Tier, listed: bool
) -> None:
    assert (transient(failure, logs, tier) is not None) == listed
