"""Interrupts: a signal to pytest mid-startup leaves nothing; a kill -9'd session is swept later.

Each test runs a real pytest session in a subprocess against a real (slow-starting) Dynamo
mocker topology, and finds what it started by the session marker alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.core.paths import REPO_ROOT, SESSION_ID_ENV
from harness.topology.processes import marked_processes

PROFILES = Path(__file__).parent / "interrupt_profiles"
# How long a test waits for a signalled session to leave nothing: the stop's own SIGTERM grace
# and SIGKILL, many times over. How fast it is, is measured in bench/teardown_speed.py.
LEFTOVER_S = 60.0


def start_session(tmp_path: Path, session_id: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, SESSION_ID_ENV: session_id, "HARNESS_RUNS": str(tmp_path)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/serve",
        "--profiles",
        str(PROFILES),
        "-q",
        "-p",
        "no:cacheprovider",
        "--tier",
        "cpu",
    ]
    log = (tmp_path / "pytest.log").open("wb")
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for_roles(session_id: str, count: int, timeout_s: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = marked_processes(SESSION_ID_ENV, session_id)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"session {session_id} started only {len(found)} marked processes")


def wait_gone(session_id: str, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not marked_processes(SESSION_ID_ENV, session_id):
            return time.monotonic() - start
        time.sleep(0.05)
    left = [
        p.info
        for p in psutil.process_iter(["pid", "cmdline"])
        if p in marked_processes(SESSION_ID_ENV, session_id)
    ]
    raise AssertionError(f"still running after {timeout_s} s: {left}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_startup_leaves_nothing(tmp_path: Path, signum: int) -> None:
    session = f"intr-{uuid.uuid4().hex[:8]}"
    proc = start_session(tmp_path, session)
    try:
        started = wait_for_roles(session, 4)  # launcher, broker, frontend, worker (60 s start)
        scratch = {Path(p.environ()["DYN_FILE_KV"]).parent for p in started if _has_kv(p)}
        assert scratch and all(d.is_dir() for d in scratch), scratch
        sent = time.monotonic()
        proc.send_signal(signum)
        gone = wait_gone(session, LEFTOVER_S)
        proc.wait(timeout=LEFTOVER_S)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"{signal.Signals(signum).name}: clean after {gone:.2f} s, pytest exited {elapsed:.2f} s")
    assert not any(d.exists() for d in scratch), f"scratch dirs left: {scratch}"


def test_killed_session_is_swept_by_the_next(tmp_path: Path) -> None:
    session = f"dead-{uuid.uuid4().hex[:8]}"
    proc = start_session(tmp_path, session)
    try:
        left = wait_for_roles(session, 4)
        scratch = {Path(p.environ()["DYN_FILE_KV"]).parent for p in left if _has_kv(p)}
        proc.kill()  # pytest gets no chance to tear down
        proc.wait(timeout=10)
        time.sleep(0.5)
        assert marked_processes(SESSION_ID_ENV, session), "kill -9 should leave orphans"
        orphan_pids = {p.pid for p in left}
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider"]
        cmd.append("tests/harness/test_profile.py")
        nxt = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert nxt.returncode == 0, nxt.stdout + nxt.stderr
        # Under `pytest -n 2` a harness session the other worker starts meanwhile may sweep them
        # first (any session of this checkout sweeps): then they are gone, swept by it.
        if marked_processes(SESSION_ID_ENV, session) or "swept a leftover" in nxt.stdout:
            assert "swept a leftover of a dead session" in nxt.stdout, nxt.stdout
            assert any(str(pid) in nxt.stdout for pid in orphan_pids)
        wait_gone(session, 5.0)
        assert scratch and not any(d.exists() for d in scratch), scratch
    finally:
        for p in marked_processes(SESSION_ID_ENV, session):
            p.kill()


def _has_kv(proc: psutil.Process) -> bool:
    try:
        return "DYN_FILE_KV" in proc.environ()
    except psutil.Error:
        return False


def test_sigterm_to_a_plain_script_holding_a_topology_tears_it_down(tmp_path: Path) -> None:
    """Not pytest, not the CLI: any script in a `with` block (a bench under `timeout`) gets
    SIGTERM turned into KeyboardInterrupt by the Topology itself."""
    session = f"script-{uuid.uuid4().hex[:8]}"
    script = (
        "import sys\nfrom pathlib import Path\nfrom harness.topology.topology import launch\n"
        "from harness.launch.launch_spec import LaunchSpec\n"
        "from harness.core.paths import REPO_ROOT\nfrom harness.profiles import load_profiles\n"
        "profile = load_profiles(Path(sys.argv[1]), REPO_ROOT)[0]\n"
        "with launch(LaunchSpec.of(profile, 'cpu', profile.cases[0])):\n    pass\n"
    )
    env = {**os.environ, SESSION_ID_ENV: session, "HARNESS_RUNS": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(PROFILES)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_roles(session, 4)
        proc.send_signal(signal.SIGTERM)
        gone = wait_gone(session, 5.0)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and b"KeyboardInterrupt: signal 15" in out, out[-2000:]
    print(f"plain script: clean {gone:.2f} s after SIGTERM")
