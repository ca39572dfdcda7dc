"""A process's identity beyond its pid: when it started, in seconds since boot.

With its pid, the start tells a process from a later one that reuses the pid. psutil's
`create_time()` is the boot time, read again from /proc/stat on every call, plus the process's
start tick. The boot time moves whenever the wall clock is stepped (NTP, a clock set after
resume, a VM restored from a snapshot), and every live process then compares as another one:
running roles would be named exited ("code unknown") and torn down (the run that showed it:
design-deviations.md at 7310361, "Process identity and the wall clock"). The start tick itself
(/proc/PID/stat field 22, clock ticks since boot) never moves; psutil keys its own
`is_running()` on it. Where there is no /proc (macOS), psutil's value is used."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
STARTTIME_FIELD = 22  # proc(5): starttime, in clock ticks since boot


def _stat_after_comm(pid: int) -> list[bytes] | None:
    """/proc/PID/stat's fields from field 3 on (None where there is no /proc); raises
    psutil.NoSuchProcess once the process is gone. `comm` may hold spaces and parentheses."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        if not (PROC / "self" / "stat").exists():
            return None
        raise psutil.NoSuchProcess(pid) from None
    return stat[stat.rindex(b")") + 2 :].split()


def _started(fields: list[bytes]) -> float:
    return int(fields[STARTTIME_FIELD - 3]) / CLOCK_TICKS


def process_started(pid: int) -> float:
    """Seconds from boot to `pid`'s start; raises psutil.NoSuchProcess once it is gone."""
    fields = _stat_after_comm(pid)
    if fields is None:
        return psutil.Process(pid).create_time()
    return _started(fields)


def is_running_as(pid: int, started: float) -> bool:
    """True while `pid` is the process that started at `started` and is not a zombie (one read
    of its stat file)."""
    try:
        fields = _stat_after_comm(pid)
        if fields is None:
            proc = psutil.Process(pid)
            return proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    return _started(fields) == started and fields[0] != b"Z"
