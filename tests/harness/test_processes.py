"""Process tools against real process trees: setsid'd grandchildren, TERM-ignorers, stale sweeps."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from harness.topology.processes import (
    CHECKOUT_ENV,
    SESSION_PID_ENV,
    START_RESOLUTION_S,
    TOPOLOGY_ID_ENV,
    EnvMarker,
    ProcessReaper,
    marked_processes,
    spawn_in_session,
    sweep_stale,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

DOUBLE_FORK_INTO_NEW_SESSION = textwrap.dedent(
    """
    import os, time
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "300"])
        os._exit(0)
    os.waitpid(middle, 0)
    time.sleep(300)
    """
)

PARENT_OF_TERM_IGNORER = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    code = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "pathlib.Path(sys.argv[1]).write_text('ignoring'); time.sleep(300)"
    )
    subprocess.Popen([sys.executable, "-c", code, sys.argv[1]])
    time.sleep(300)
    """
)


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@pytest.fixture(scope="module", autouse=True)
def adopt_orphans() -> Iterator[None]:
    """Orphans come to this process (not PID 1, which may never reap) so nothing lingers."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie is dead, only not yet reaped)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def marker() -> Iterator[EnvMarker]:
    """A fresh topology marker; the test fails if anything carrying it outlives the test."""
    value = uuid.uuid4().hex
    yield (TOPOLOGY_ID_ENV, value)
    leftovers = [p for p in marked_processes(TOPOLOGY_ID_ENV, value) if _alive(p)]
    ProcessReaper().stop(None, (TOPOLOGY_ID_ENV, value), grace_s=1.0)
    assert leftovers == [], f"test left processes behind: {leftovers}"


def marked_env(marker: EnvMarker, **extra: str) -> dict[str, str]:
    return {**os.environ, marker[0]: marker[1], **extra}


def wait_until(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.02)


def named(procs: list[psutil.Process], name: str) -> list[psutil.Process]:
    """Those called `name`; one that exits between the scan and the look (the double fork's
    middle process does, by design) is not one of them."""
    found = []
    for proc in procs:
        try:
            if proc.name() == name:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def test_spawn_in_session_leads_a_new_session_and_logs_both_streams(
    marker: EnvMarker, tmp_path: Path
) -> None:
    log = tmp_path / "logs" / "launcher.log"
    code = "import sys; print('out'); print('err', file=sys.stderr); print(sys.stdin.read() == '')"
    proc = spawn_in_session([sys.executable, "-c", code], marked_env(marker), log, tmp_path)
    assert os.getsid(proc.pid) == proc.pid
    assert os.getpgid(proc.pid) == proc.pid
    assert proc.wait(timeout=10) == 0
    assert sorted(log.read_text().split()) == ["True", "err", "out"]


def test_marker_finds_setsid_grandchild_and_stop_kills_it(
    marker: EnvMarker, tmp_path: Path
) -> None:
    root = spawn_in_session(
        [sys.executable, "-c", DOUBLE_FORK_INTO_NEW_SESSION],
        marked_env(marker),
        tmp_path / "root.log",
        tmp_path,
    )
    wait_until(lambda: named(marked_processes(*marker), "sleep"))
    (grandchild,) = named(marked_processes(*marker), "sleep")
    assert grandchild.pid not in {c.pid for c in root.children(recursive=True)}
    assert os.getsid(grandchild.pid) != os.getsid(root.pid)

    report = ProcessReaper().stop(root, marker, grace_s=5.0)

    assert report.survivors == []
    assert {root.pid, grandchild.pid} <= set(report.signalled_pids)
    assert not report.escalated_to_kill
    assert is_dead(grandchild)
    assert root.returncode is not None


def is_dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie that reparenting has not yet handed to a reaper (its parent was killed
    with it). Once under -n 2 the killed member's pid still existed after a stop that counted
    no survivor: a zombie waiting for its new parent."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_escalates_to_kill_for_a_member_that_ignores_term(
    marker: EnvMarker, tmp_path: Path
) -> None:
    ready = tmp_path / "ignoring-term"
    root = spawn_in_session(
        [sys.executable, "-c", PARENT_OF_TERM_IGNORER, str(ready)],
        marked_env(marker),
        tmp_path / "root.log",
        tmp_path,
    )
    wait_until(ready.exists)
    (stubborn,) = root.children()

    report = ProcessReaper().stop(root, marker, grace_s=0.5)

    assert report.escalated_to_kill
    assert report.survivors == []
    assert report.duration_s >= 0.5
    assert {root.pid, stubborn.pid} <= set(report.signalled_pids)
    assert is_dead(stubborn)


def test_remembered_group_catches_an_unmarked_orphan(marker: EnvMarker, tmp_path: Path) -> None:
    """`env -i` drops the marker and the middle process exits: only its group still names it."""
    pid_file = tmp_path / "orphan.pid"
    script = f"setsid bash -c 'env -i sleep 300 & echo $! > {pid_file}; sleep 1' & wait"
    root = spawn_in_session(
        ["bash", "-c", script], marked_env(marker), tmp_path / "r.log", tmp_path
    )
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip())
    orphan = psutil.Process(int(pid_file.read_text()))
    reaper = ProcessReaper()
    reaper.remember(root, marker)
    wait_until(
        lambda: orphan.ppid() != 0 and orphan.pid not in [c.pid for c in root.children(True)]
    )
    assert orphan.pid not in {p.pid for p in marked_processes(*marker)}

    report = reaper.stop(root, marker, grace_s=5.0)

    assert orphan.pid in report.signalled_pids
    assert report.survivors == []
    assert not psutil.pid_exists(orphan.pid)


def test_sweep_stale_removes_orphans_of_dead_sessions_only(
    marker: EnvMarker, tmp_path: Path
) -> None:
    checkout = f"/tmp/checkout-{uuid.uuid4().hex}"
    live_session = subprocess.Popen(["sleep", "300"])
    dead_session = subprocess.Popen(["sleep", "300"])
    later_session = None
    pid_file = tmp_path / "later.pid"
    try:

        def orphan_of(session_pid: int, name: str) -> psutil.Popen:
            env = marked_env(marker, **{CHECKOUT_ENV: checkout, SESSION_PID_ENV: str(session_pid)})
            return spawn_in_session(["sleep", "300"], env, tmp_path / f"{name}.log", tmp_path)

        kept = orphan_of(live_session.pid, "kept")
        stale = orphan_of(dead_session.pid, "stale")
        # Its session pid belongs to a process created after it: a reused pid, so also stale.
        wait_for_pid = f"while [ ! -s {pid_file} ]; do sleep 0.05; done; exec env "
        wait_for_pid += f'{SESSION_PID_ENV}="$(cat {pid_file})" sleep 300'
        env = marked_env(marker, **{CHECKOUT_ENV: checkout})
        reused = spawn_in_session(["bash", "-c", wait_for_pid], env, tmp_path / "r.log", tmp_path)
        time.sleep(0.1)
        later_session = subprocess.Popen(["sleep", "300"])
        pid_file.write_text(str(later_session.pid))
        wait_until(lambda: reused.environ().get(SESSION_PID_ENV) == str(later_session.pid))
        dead_session.kill()
        dead_session.wait()

        removed = sweep_stale(checkout)

        assert len(removed) == 2
        assert any(f"pid {stale.pid} " in line for line in removed)
        assert any(f"pid {reused.pid} " in line for line in removed)
        # Killed: poll() reaps them (a killed child stays a zombie until its parent waits).
        assert stale.poll() is not None and reused.poll() is not None
        assert kept.is_running() and kept.poll() is None
        assert sweep_stale(checkout) == []
        ProcessReaper().stop(kept, marker, grace_s=2.0)
    finally:
        for session in (live_session, dead_session, later_session):
            if session is not None:
                session.kill()
                session.wait()


MAPS_AND_WAITS = """
import mmap, os, sys, time
maps = []
for path in sys.argv[2:]:
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(bytes(32))
    with open(path, "r+b") as f:
        maps.append(mmap.mmap(f.fileno(), 32))
open(sys.argv[1], "w").close()
time.sleep(300)
"""


def test_a_stop_removes_the_shm_files_its_tree_made_and_left(
    marker: EnvMarker, tmp_path: Path
) -> None:
    """As SGLang's roles leave their named semaphores and `sglang_loads_*.shm` whatever the
    grace: what the tree made and still mapped goes with it; a file it only used stays."""
    tag = uuid.uuid4().hex[:12]
    older = Path(f"/dev/shm/harness-test-older-{tag}")
    older.write_bytes(bytes(32))
    os.utime(older, (time.time() - 60, time.time() - 60))  # mtime only; ctime is now...
    made = Path(f"/dev/shm/harness-test-made-{tag}")
    ready = tmp_path / "mapped"
    try:
        time.sleep(START_RESOLUTION_S * 3)  # ...so the tree starts clearly after it
        root = spawn_in_session(
            [sys.executable, "-c", MAPS_AND_WAITS, str(ready), str(older), str(made)],
            marked_env(marker),
            tmp_path / "root.log",
            tmp_path,
        )
        wait_until(ready.exists)
        report = ProcessReaper().stop(root, marker, grace_s=2.0)
        assert report.survivors == []
        assert report.removed_shm == [made.name]
        assert not made.exists() and older.exists()
    finally:
        made.unlink(missing_ok=True)
        older.unlink(missing_ok=True)
