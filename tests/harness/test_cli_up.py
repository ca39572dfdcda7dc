"""`python -m harness up` against a real (mocker) topology: ready, then SIGINT or SIGTERM tears
it down with nothing left behind: no process carrying its marker, no lease, no bound port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.core.paths import TOPOLOGY_ID_ENV
from harness.topology.processes import listening_ports, marked_processes

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_PROFILES = REPO_ROOT / "tests" / "harness" / "profiles"
UP = [sys.executable, "-m", "harness", "up"]


@dataclass
class UpRun:
    ready_s: float
    stop_s: float
    exit_code: int
    topology_id: str
    ports: dict[str, int]
    output: str


def interrupt_up(
    profile: str,
    *,
    profiles: Path,
    tier: str = "cpu",
    signum: int = signal.SIGINT,
    ready_timeout_s: float = 120.0,
    stop_timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
) -> UpRun:
    """Run `harness up`, wait for its ready banner, send `signum`, wait for it to exit."""
    argv = [*UP, profile, "--tier", tier]
    argv += ["--profiles", str(profiles)]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        ready_s = _wait_for_banner(proc, lines, started, ready_timeout_s)
        proc.send_signal(signum)
        signalled = time.monotonic()
        rest, _ = proc.communicate(timeout=stop_timeout_s)
        lines.append(rest)
        stop_s = time.monotonic() - signalled
    finally:
        if proc.poll() is None:  # only on a failed test: never leave it running
            proc.kill()
            proc.wait()
    output = "".join(lines)
    tid = re.search(r"HARNESS_TOPOLOGY_ID=([0-9a-f]+)", output)
    ports = re.search(r"^ports\s+(.*)$", output, re.M)
    assert tid and ports, f"no marker/ports line in the banner:\n{output}"
    port_map = {k: int(v) for k, v in (kv.split("=") for kv in ports.group(1).split())}
    return UpRun(ready_s, stop_s, proc.returncode, tid.group(1), port_map, output)


def _wait_for_banner(
    proc: subprocess.Popen[str], lines: list[str], started: float, timeout_s: float
) -> float:
    assert proc.stdout is not None
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break  # exited before ready
        lines.append(line)
        if line.startswith("Ctrl-C"):
            return time.monotonic() - started
    raise AssertionError(f"`harness up` not ready within {timeout_s} s:\n{''.join(lines)}")


def assert_nothing_left(run: UpRun, registry: Path) -> None:
    assert not marked_processes(TOPOLOGY_ID_ENV, run.topology_id), "marked processes remain"
    listening = listening_ports(run.ports.values())
    assert not listening, f"ports still listening after teardown: {listening}"
    assert run.topology_id[:8] not in registry.read_text(), "port lease not released"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_up_tears_down_on_signal(tmp_path: Path, signum: int) -> None:
    registry = tmp_path / "ports.json"
    run = interrupt_up(
        "mocker_fault",
        profiles=TEST_PROFILES,
        signum=signum,
        ready_timeout_s=60,
        env={"HARNESS_PORT_REGISTRY": str(registry), "HARNESS_RUNS": str(tmp_path / "runs")},
    )
    assert run.exit_code == 0, run.output
    assert "no process or port left" in run.output
    assert set(run.ports) >= {"DYN_HTTP_PORT", "DYN_SYSTEM_PORT1"}
    assert_nothing_left(run, registry)
    print(run.output)


def test_up_unknown_profile_names_the_choices() -> None:
    out = subprocess.run(
        [*UP, "nope", "--profiles", str(TEST_PROFILES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no profile named 'nope'" in out.stderr and "mocker_fault" in out.stderr


def test_up_unknown_case_names_the_cases() -> None:
    out = subprocess.run(
        [*UP, "mocker_fault", "--case", "x", "--profiles", str(TEST_PROFILES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "has no case 'x'; cases: default" in out.stderr
