"""The operating-system side of a launch: its process trees, the ports they hold, and signals.

- `spawn_in_session`, `ProcessReaper`, `sweep_stale`: process trees keyed by env markers: spawn
  in a new session, find marked processes, stop them. Every process a topology launches inherits the
  env markers from docs/reference/contracts.md, so a stop can catch processes that left the process
  group (double forks, `setsid`) and a later session can sweep what a `kill -9`'d pytest left
  behind. Nothing here kills by name: only by PID, group or marker.
- `shm_files_of`: the /dev/shm files a tree maps, so that what its engines leave there (SGLang's
  named semaphores and `sglang_loads_*.shm`, left whatever the grace) goes with it.
- `listeners`, `foreign_listeners`, `exposed_listeners`: who listens on a set of ports: for the
  pre-launch squat check and the teardown check.
- `handling`: Ctrl-C and SIGTERM handled temporarily: handlers installed for a block, restored
  after."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.core.paths import CHECKOUT_ENV, SESSION_PID_ENV, TOPOLOGY_ID_ENV, EnvMarker
from harness.core.process_start import process_started

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, Any], Any] | int


@contextlib.contextmanager
def handling(handler: Handler, signals: tuple[int, ...] = INTERRUPTS) -> Iterator[None]:
    """`handler` (a function, SIG_IGN or SIG_DFL) for `signals` inside the block only."""
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM handled like Ctrl-C: raise KeyboardInterrupt so the same cleanup runs."""
    raise KeyboardInterrupt(f"signal {signum}")


def term_raises_interrupt() -> Callable[[], None]:
    """While SIGTERM would kill this process outright (default handler, main thread), make it
    raise KeyboardInterrupt instead, so the `with` blocks that started processes stop them.
    Returns the function that puts the default back (a no-op if nothing was changed)."""
    in_main = threading.current_thread() is threading.main_thread()
    if not in_main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, raise_interrupt)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is raise_interrupt:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return restore


def listeners(ports: Iterable[int]) -> dict[int, int | None]:
    """port -> pid (None if unknown) for each of these ports in LISTEN state."""
    wanted = set(ports)
    found: dict[int, int | None] = {}
    with contextlib.suppress(psutil.AccessDenied):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in wanted:
                found[conn.laddr.port] = conn.pid
    return found


def listening_ports(ports: Iterable[int]) -> list[int]:
    return sorted(listeners(ports))


def foreign_listeners(ports: Mapping[str, int]) -> list[tuple[str, int, str]]:
    """(name, port, who) for each leased port something already listens on. Called before the
    spawn, so every listener is foreign: a squatter, or a leak of an earlier run."""
    by_port = {port: name for name, port in ports.items()}
    found = listeners(by_port)
    return [(by_port[port], port, _describe_pid(found[port])) for port in sorted(found)]


def _describe_pid(pid: int | None) -> str:
    if pid is None:
        return "pid unknown"
    try:
        return f"pid {pid}: {' '.join(psutil.Process(pid).cmdline())[:80]}"
    except psutil.Error:
        return f"pid {pid}"


LOOPBACK = ("127.0.0.1", "::1")


def exposed_listeners(
    pids: Iterable[int], allowed_ports: Iterable[int] = ()
) -> list[tuple[int | None, str]]:
    """(pid, 'address:port (pid: cmdline)') for every socket these processes listen on beyond
    loopback, but on `allowed_ports`."""
    allowed = set(allowed_ports)
    wanted = set(pids)
    found = []
    with contextlib.suppress(psutil.AccessDenied):
        for conn in psutil.net_connections(kind="inet"):
            if conn.status != psutil.CONN_LISTEN or conn.pid not in wanted or not conn.laddr:
                continue
            if conn.laddr.ip not in LOOPBACK and conn.laddr.port not in allowed:
                where = f"{conn.laddr.ip}:{conn.laddr.port} ({_describe_pid(conn.pid)})"
                found.append((conn.pid, where))
    return sorted(found, key=lambda item: item[1])


_POLL_S = 0.02


@dataclass(frozen=True)
class Survivor:
    """A process that was still running after a stop gave up on it."""

    pid: int
    cmdline: str


@dataclass(frozen=True)
class StopReport:
    """What a stop did: how long it took, whom it signalled, who outlived it (should be empty)."""

    duration_s: float
    signalled_pids: list[int]
    survivors: list[Survivor]
    escalated_to_kill: bool
    # /dev/shm files the tree mapped, made while it ran, still there once it was gone: removed
    removed_shm: list[str] = field(default_factory=list)


def spawn_in_session(
    argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path | str
) -> psutil.Popen:
    """Start `argv` as the leader of a new session and process group.

    `env` is the complete environment (callers merge os.environ and the markers themselves).
    stdout and stderr append to `log_path`; stdin is /dev/null.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return psutil.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def marked_processes(key: str, value: str) -> list[psutil.Process]:
    """Live processes (never this one) whose initial environment has `key=value`.

    Processes we may not read (other users) and zombies (already dead, environ gone) are skipped.
    """
    found: list[psutil.Process] = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.AccessDenied, psutil.NoSuchProcess):
            if proc.environ().get(key) == value:
                found.append(proc)
    return found


@dataclass(frozen=True)
class _RememberedGroup:
    """A process group id and its leader's create time (None if the leader was already gone)."""

    pgid: int
    leader_started: float | None


def _own_groups() -> set[int]:
    return {os.getpgrp(), 0, 1}


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"


def _is_running(proc: psutil.Process) -> bool:
    """Still there to wait for. A zombie counts as gone only once its last thread has exited:
    the thread-group leader of a multi-threaded process turns zombie while its other threads are
    still exiting, and the file table (its listening sockets) goes with the last of them."""
    try:
        if not proc.is_running():
            return False
        return proc.status() != psutil.STATUS_ZOMBIE or _threads_exiting(proc.pid)
    except psutil.NoSuchProcess:
        return False


def _threads_exiting(pid: int) -> bool:
    """Threads of `pid` other than its (zombie) leader are still listed (Linux /proc)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _reap_if_own_zombie(proc: psutil.Process) -> None:
    """waitpid a zombie that is our child (including adopted orphans when we are a subreaper)."""
    with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
        if proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() == os.getpid():
            os.waitpid(proc.pid, os.WNOHANG)


def _wait_gone(procs: Iterable[psutil.Process], deadline: float) -> list[psutil.Process]:
    """Wait until every process has exited (reaping our own), or the deadline; return the rest."""
    pending = list(procs)
    while True:
        for proc in pending:
            if isinstance(proc, psutil.Popen):
                proc.poll()
            else:
                _reap_if_own_zombie(proc)
        pending = [p for p in pending if _is_running(p)]
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(_POLL_S)


@dataclass
class ProcessReaper:
    """Stops a launched tree: TERM every group seen, wait, KILL groups and marked processes, reap.

    Call `remember()` now and then while the tree runs: a group whose members were
    reparented (their parent exited) is then still signalled at stop time. A remembered group is
    only signalled while it is provably the same group (its leader has the remembered create time,
    or the leader is gone and the id cannot have been reused while members remain).
    """

    kill_wait_s: float = 5.0
    _groups: dict[int, _RememberedGroup] = field(default_factory=dict)
    _seen: dict[int, psutil.Process] = field(default_factory=dict)

    def remember(self, root: psutil.Popen | None, marker: EnvMarker) -> None:
        """Record the root, its descendants and every marked process, and their process groups.
        Every process ever recorded is stopped and waited for by PID (with its create time, so
        a reused pid is not mistaken for it): a SIGKILLed process releases its memory, so its
        marker can no longer be read, before it closes its sockets."""
        procs = _tree_and_marked(root, marker)
        self._remember_groups_of(procs)
        for proc in procs:
            self._seen.setdefault(proc.pid, proc)

    def _with_seen(self, found: list[psutil.Process]) -> list[psutil.Process]:
        by_pid = {p.pid: p for p in found}
        for pid, proc in self._seen.items():
            if pid not in by_pid and _is_running(proc):
                by_pid[pid] = proc
        return list(by_pid.values())

    def stop(self, root: psutil.Popen | None, marker: EnvMarker, grace_s: float) -> StopReport:
        """Stop the tree under `root`, everything carrying `marker` and every process recorded
        while it ran; wait for each by PID; report the survivors."""
        report = self._stop(lambda: self._with_seen(_tree_and_marked(root, marker)), grace_s)
        if root is not None:
            root.poll()
        return report

    def stop_processes(self, procs: Sequence[psutil.Process], grace_s: float) -> StopReport:
        """Stop exactly these processes and their process groups; verify and report."""
        return self._stop(lambda: [p for p in procs if _is_running(p)], grace_s)

    def _stop(self, find: Callable[[], list[psutil.Process]], grace_s: float) -> StopReport:
        started = time.monotonic()
        self._remember_groups_of(find())
        targets = self._with_group_members(find())
        shm = shm_files_of(targets)
        born = min((t for p in targets if (t := _created(p)) is not None), default=time.time())
        signalled = {p.pid for p in targets}
        self._signal(targets, signal.SIGTERM)
        pending = _wait_gone(targets, time.monotonic() + grace_s)
        self._remember_groups_of(find())
        pending_pids = {p.pid for p in pending}
        late = [p for p in self._with_group_members(find()) if p.pid not in pending_pids]
        pending = [p for p in pending + late if _is_running(p)]
        deadline = time.monotonic() + self.kill_wait_s
        killed = bool(pending)
        while pending:  # until nothing of it runs: a process may start while it is being stopped
            signalled.update(p.pid for p in pending)
            self._signal(pending, signal.SIGKILL)
            survivors = _wait_gone(pending, deadline)
            if time.monotonic() >= deadline:
                break
            known = {p.pid for p in survivors}
            late = [p for p in self._with_group_members(find()) if p.pid not in known]
            pending = survivors + late
        survivors = [p for p in pending if _is_running(p)]
        return StopReport(
            duration_s=time.monotonic() - started,
            signalled_pids=sorted(signalled),
            survivors=[Survivor(p.pid, _cmdline(p)) for p in survivors],
            escalated_to_kill=killed,
            removed_shm=[] if survivors else remove_left(shm, born),
        )

    def _remember_groups_of(self, procs: Iterable[psutil.Process]) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error, OSError):
                pgid = os.getpgid(proc.pid)
                if pgid not in _own_groups() and pgid not in self._groups:
                    self._groups[pgid] = _RememberedGroup(pgid, _started_or_none(pgid))

    def _live_groups(self) -> set[int]:
        """Remembered groups that are still the same group (not a reused id)."""
        return {
            g.pgid
            for g in self._groups.values()
            if _started_or_none(g.pgid) in (None, g.leader_started)
        }

    def _with_group_members(self, tracked: list[psutil.Process]) -> list[psutil.Process]:
        groups = self._live_groups()
        by_pid = {p.pid: p for p in tracked}
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.pid not in by_pid and os.getpgid(proc.pid) in groups:
                    by_pid[proc.pid] = proc
        return [p for p in by_pid.values() if _is_running(p)]

    def _signal(self, procs: list[psutil.Process], signum: signal.Signals) -> None:
        for pgid in self._live_groups():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signum)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signum)


def _started_or_none(pid: int) -> float | None:
    try:
        return process_started(pid)
    except psutil.NoSuchProcess:
        return None


SHM_DIR = "/dev/shm/"
# a process's start is read in clock ticks (process_start.py: 1/SC_CLK_TCK, 10 ms on Linux)
START_RESOLUTION_S = 0.1


def _created(proc: psutil.Process) -> float | None:
    """When `proc` started, on the wall clock that file times use: its start since boot (the
    tick, not psutil's whole-second boot time) placed by the uptime now."""
    try:
        since_boot = process_started(proc.pid)
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (psutil.Error, OSError, ValueError):
        return None
    return time.time() - (uptime - since_boot)


def shm_files_of(procs: Iterable[psutil.Process]) -> set[Path]:
    """The /dev/shm files these processes map now (POSIX shared memory, named semaphores), as
    /proc/<pid>/maps lists them; those already unlinked are left out."""
    found: set[Path] = set()
    for proc in procs:
        with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/maps") as maps:
            for line in maps:
                at = line.find(SHM_DIR)
                if at >= 0 and not line.rstrip().endswith("(deleted)"):
                    found.add(Path(line[at:].rstrip("\n")))
    return found


def remove_left(files: Iterable[Path], born: float) -> list[str]:
    """Remove those of `files` still there that were made after `born` (the tree's first
    process started): what the stopped tree made and left, never an older file it only used."""
    removed = []
    for path in sorted(files):
        with contextlib.suppress(OSError):
            if path.stat().st_ctime >= born - START_RESOLUTION_S:
                path.unlink()
                removed.append(path.name)
    return removed


def _tree_and_marked(root: psutil.Popen | None, marker: EnvMarker) -> list[psutil.Process]:
    tracked: list[psutil.Process] = []
    if root is not None and _is_running(root):
        tracked.append(root)
        with contextlib.suppress(psutil.NoSuchProcess):
            tracked.extend(root.children(recursive=True))
    tracked.extend(marked_processes(*marker))
    return [p for p in tracked if _is_running(p)]


def _session_is_gone(proc: psutil.Process, session_pid: int) -> bool:
    """True if the session owner died; a live pid created after `proc` is a reused pid."""
    try:
        owner = psutil.Process(session_pid)
        return owner.status() == psutil.STATUS_ZOMBIE or process_started(
            session_pid
        ) > process_started(proc.pid)
    except psutil.NoSuchProcess:
        return True


def stale_processes(checkout: str) -> list[tuple[psutil.Process, dict[str, str]]]:
    """Processes of `checkout` whose owning session (HARNESS_SESSION_PID) is gone, with their
    environments. Processes of live sessions and of other checkouts are not listed."""
    stale: list[tuple[psutil.Process, dict[str, str]]] = []
    for proc in marked_processes(CHECKOUT_ENV, checkout):
        with contextlib.suppress(psutil.Error, KeyError, ValueError):
            environ = proc.environ()
            session_pid = int(environ[SESSION_PID_ENV])  # no owner named: not ours to judge
            if session_pid > 0 and _session_is_gone(proc, session_pid):
                stale.append((proc, environ))
    return stale


def describe_stale(proc: psutil.Process, environ: Mapping[str, str]) -> str:
    return (
        f"pid {proc.pid} ({_cmdline(proc)}) of dead session pid "
        f"{environ.get(SESSION_PID_ENV, '?')}, topology {environ.get(TOPOLOGY_ID_ENV, '?')}"
    )


def sweep_stale(
    checkout: str,
    grace_s: float = 2.0,
    cleanup: Callable[[dict[str, str]], None] | None = None,
) -> list[str]:
    """Stop the stale processes of `checkout` (for the "pytest was kill -9'd" case: the next
    session calls this first). Returns one description per process stopped."""
    stale = stale_processes(checkout)
    descriptions = [describe_stale(proc, environ) for proc, environ in stale]
    ProcessReaper().stop_processes([proc for proc, _ in stale], grace_s)
    if cleanup is not None:
        for _, environ in stale:
            cleanup(environ)
    return descriptions
