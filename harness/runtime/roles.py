"""The processes behind a running plan: the launcher and the roles it started, read from the
files the launcher contract writes beside each role's log (launchers/lib/common.sh): NAME.pid,
NAME.exit (the first role to exit, with its code) and roles.started."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.core.process_start import is_running_as, process_started
from harness.runtime.plan import LaunchPlan

LOG_TAIL_LINES = 30
STARTED_FILE = "roles.started"
EXIT_SUFFIX = ".exit"


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A worker's system port logs an ERROR for every 503 it answers, i.e. for each of the harness's
# own /health polls while it starts: dozens of lines that would push the real cause out of a tail.
HEALTH_POLL_503 = re.compile(r"tower_http::trace::on_failure.*Status code: 503")


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines worth reading: colour codes stripped, the health-poll 503 lines
    folded into one note."""
    try:
        data = path.read_bytes()[-64_000:]
    except FileNotFoundError:
        return f"(no log at {path})"
    text = ANSI_ESCAPE.sub("", data.decode(errors="replace"))
    return "\n".join(fold_health_polls(text.splitlines())[-lines:])


def fold_health_polls(lines: list[str]) -> list[str]:
    """Drop the health-poll 503 lines; one note, where the last of them was, says how many."""
    kept: list[str] = []
    dropped, note_at = 0, 0
    for line in lines:
        if HEALTH_POLL_503.search(line):
            dropped, note_at = dropped + 1, len(kept)
        else:
            kept.append(line)
    if not dropped:
        return lines
    note = f"[{dropped} x '503 Service Unavailable' lines from the harness's /health polls, elided]"
    return [*kept[:note_at], note, *kept[note_at:]]


@dataclass
class RoleProcess:
    name: str
    pid: int
    started: float  # harness/core/process_start.py: survives a wall-clock step

    def alive(self) -> bool:
        return is_running_as(self.pid, self.started)


class RoleTable:
    """Finds each role's pid from the launcher's pid files and says which ones have exited."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.known: dict[str, RoleProcess] = {}

    def log_path(self, role: str) -> Path:
        return self.plan.log_dir / f"{role}.log"

    @property
    def launcher_log(self) -> Path:
        return self.plan.log_dir / "launcher.log"

    def refresh(self) -> None:
        for role in self.plan.roles:
            if role.name in self.known:
                continue
            pid_file = self.plan.log_dir / f"{role.name}.pid"
            try:
                pid = int(pid_file.read_text().strip())
                self.known[role.name] = RoleProcess(role.name, pid, process_started(pid))
            except (FileNotFoundError, ValueError):
                continue
            except psutil.NoSuchProcess:
                self.known[role.name] = RoleProcess(role.name, pid, 0.0)

    def exited(self) -> list[str]:
        """Roles no longer running; the one the launcher saw exit first comes first."""
        gone = [name for name, proc in self.known.items() if not proc.alive()]
        first = self.first_exit()
        return sorted(gone, key=lambda name: name != first)

    def first_exit(self) -> str | None:
        """The role whose exit ended the launcher (its NAME.exit file), if one has."""
        found = sorted(self.plan.log_dir.glob(f"*{EXIT_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        return found[0].name.removesuffix(EXIT_SUFFIX) if found else None

    def exit_code(self, role: str) -> int | None:
        """The code the launcher saw the role exit with, if it wrote one."""
        try:
            return int((self.plan.log_dir / f"{role}{EXIT_SUFFIX}").read_text().strip())
        except (OSError, ValueError):
            return None

    def owner_of(self, pid: int | None) -> str:
        """'role prefill (pid 123)' if `pid` is one of ours (or a child of one), else the pid."""
        if pid is None:
            return "an unknown process"
        for name, proc in self.known.items():
            with contextlib.suppress(psutil.Error):
                tree = {proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(True))}
                if pid in tree:
                    return f"role '{name}' (pid {pid})"
        return f"pid {pid}, not a role of this topology"

    def missing(self) -> list[str]:
        return [r.name for r in self.plan.roles if r.name not in self.known]

    def never_started(self) -> tuple[list[str], list[str]] | None:
        """Once the launcher says it started all its roles (its roles.started file): the
        declared roles it did not start, and the ones it did. None while it is still starting
        them."""
        try:
            started = (self.plan.log_dir / STARTED_FILE).read_text().split()
        except FileNotFoundError:
            return None
        return [r.name for r in self.plan.roles if r.name not in started], started
