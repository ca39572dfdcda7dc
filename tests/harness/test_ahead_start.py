"""The pool's overlap (harness/suite/prestart.py) on two real launches of the fault tests'
frontend + Dynamo mocker topology: the next launch starts while the current one still serves and
tears down, yet its clock, readiness and progress lines stay its own; a launch started ahead that
the run no longer needs is stopped mid-start with nothing left. The overlap itself is engine-blind
(it starts and stops launches); a vLLM engine stopped mid-start is test_teardown_midstart's."""

from __future__ import annotations

import time

import pytest

from harness.core.markers import TOPOLOGY_ID_ENV
from harness.core.paths import REPO_ROOT
from harness.judging.chat_request import warmup_bodies
from harness.profiles import load_profile
from harness.runtime.listeners import listening_ports
from harness.runtime.processes import marked_processes
from harness.suite.pool import TopologyPool

MOCKER = REPO_ROOT / "tests" / "harness" / "profiles" / "mocker.yaml"
# The second launch's mocker holds its engine this long before it serves (its own
# --startup-time flag): long enough that the launch is still starting when the test looks.
SECOND_STARTUP_S = 4


def two_launches() -> tuple[object, object, object]:
    """The mocker profile's case, and the same case with a slower mocker start: two launch
    signatures."""
    profile = load_profile(MOCKER, REPO_ROOT)
    first = profile.cases[0]
    slower = first.model_copy(update={"launcher_args": ["--startup-time", str(SECOND_STARTUP_S)]})
    return profile, first, slower


def test_the_next_launch_starts_ahead_on_its_own_clock(urls: object) -> None:
    profile, first, second = two_launches()
    lines: list[tuple[float, str]] = []
    pool = TopologyPool(
        "cpu",
        lambda sig: warmup_bodies([], urls),  # type: ignore[arg-type]
        say=lambda line: lines.append((time.monotonic(), line)),
        next_launch=lambda sig: (profile, second),  # type: ignore[return-value]
    )
    with pool:
        current = pool.get(profile, first)  # type: ignore[arg-type]
        ready_at = time.monotonic()
        assert pool.ahead is not None, "no launch was started ahead"
        ahead = pool.ahead.topo
        # started after the current launch was ready: it cannot have slowed that readiness
        assert current.timeline.start + (current.ready_s or 0) <= ahead.timeline.start <= ready_at
        time.sleep(2.0)  # the current launch "serves" while the next one starts
        assert ahead.processes(), "the launch started ahead has no process"
        nxt = pool.get(profile, second)  # type: ignore[arg-type]
        assert nxt is ahead and pool.current is ahead
        assert nxt.ready_s is not None and nxt.ready_s == pytest.approx(
            nxt.phase_times["loopback_only"], abs=0.5
        )
        assert nxt.plan.ports.keys() == current.plan.ports.keys()
        assert set(nxt.plan.ports.values()).isdisjoint(current.plan.ports.values())
    said = [line for _, line in lines]
    torn = next(i for i, line in enumerate(said) if "torn down" in line)
    launching = next(i for i, line in enumerate(said) if "started ahead" in line)
    events_of_next = [i for i, line in enumerate(said)
                      if line.startswith(f"  {profile.name} +") and i > torn]  # fmt: skip
    # the next launch's state changes are told after the current one is gone, none before
    assert launching > torn and events_of_next, said
    assert all(i > launching for i in events_of_next), said
    told_before = sum(1 for line in said[:torn] if line.startswith(f"  {profile.name} +"))
    assert told_before == len(current.timeline.events), said


def test_a_launch_started_ahead_and_not_needed_leaves_nothing(urls: object) -> None:
    profile, first, second = two_launches()
    pool = TopologyPool(
        "cpu",
        lambda sig: warmup_bodies([], urls),  # type: ignore[arg-type]
        next_launch=lambda sig: (profile, second),  # type: ignore[return-value]
    )
    with pool:
        pool.get(profile, first)  # type: ignore[arg-type]
        assert pool.ahead is not None
        ahead = pool.ahead.topo
        time.sleep(1.0)  # mid-start: its mocker is still in its --startup-time
        assert ahead.ready_s is None, "the launch started ahead was ready: not a mid-start stop"
    ports = list(ahead.plan.ports.values())
    assert not marked_processes(TOPOLOGY_ID_ENV, ahead.plan.topology_id)
    assert not listening_ports(ports)
    assert pool.ahead is None and pool.current is None
