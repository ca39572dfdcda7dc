"""A stepped wall clock (NTP, a VM restored from a snapshot) must not make a running process
look like another one. The step is a test double (`step_the_wall_clock`): psutil's boot time,
the value a real step moves, shifted by an hour; the processes are real."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psutil
import pytest
from psutil import _pslinux

from harness.core.process_start import process_started
from harness.machine.lease_file import NewLease, OwnedLease
from harness.topology.roles import RoleProcess

STEP_S = 3600.0

pytestmark = pytest.mark.skipif(not psutil.LINUX, reason="the /proc start tick is Linux's")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def step_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """TEST DOUBLE: /proc/stat's btime as it reads after the clock is stepped an hour ahead."""
    real = _pslinux.boot_time
    monkeypatch.setattr(_pslinux, "boot_time", lambda: real() + STEP_S)


def test_a_start_time_is_the_one_psutil_keys_its_identity_on(sleeper: subprocess.Popen) -> None:
    proc = psutil.Process(sleeper.pid)
    assert process_started(sleeper.pid) == pytest.approx(proc._ident[1])
    with pytest.raises(psutil.NoSuchProcess):
        process_started(2**22 + 1)  # above pid_max's ceiling: never a process


def test_a_running_role_stays_running_across_a_clock_step(
    sleeper: subprocess.Popen, request: pytest.FixtureRequest
) -> None:
    role = RoleProcess("worker", sleeper.pid, process_started(sleeper.pid))
    epoch_before = psutil.Process(sleeper.pid).create_time()
    request.getfixturevalue("step_the_wall_clock")
    # the double moves what a real step moves: psutil's epoch create time
    assert psutil.Process(sleeper.pid).create_time() == pytest.approx(epoch_before + STEP_S)
    assert role.alive(), "a clock step made a running role look exited"
    sleeper.kill()
    sleeper.wait()
    assert not role.alive()


@pytest.mark.usefixtures("step_the_wall_clock")
def test_a_lease_owner_stays_alive_across_a_clock_step(sleeper: subprocess.Popen) -> None:
    lease = OwnedLease(**NewLease.for_owner(sleeper.pid).fields("ports"))
    assert lease.owner_is_alive(), "a clock step made a live lease owner look dead"
    sleeper.kill()
    sleeper.wait()
    assert not lease.owner_is_alive()
