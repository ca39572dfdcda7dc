"""The processes behind a running plan (`RoleTable`): the launcher and the roles it started, read
from the files the launcher contract writes beside each role's log (launchers/lib/common.sh):
NAME.pid, NAME.exit (the first role to exit, with its code) and roles.started; where each worker's
system port really is (its adapter's record); what a role logged of its failure (own_words.py)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.core.process_start import is_running_as, process_started
from harness.core.role_contract import SYSTEM_PORT_ENV, adapter_record
from harness.launch.plan import LaunchPlan
from harness.topology.log_tail import LOG_SCAN_BYTES
from harness.topology.own_words import own_words

STARTED_FILE = "roles.started"

EXIT_SUFFIX = ".exit"

# The launcher writes NAME.exit as its `wait -n` returns, milliseconds after the role dies on a
# quiet box; CI saw the diagnosis read before it on a loaded 2-core one (2026-12-04): 1 s of
# polling only runs when the file is missing, and only once a role has died.
EXIT_RECORD_GRACE_S = 1.0


@dataclass
class RoleProcess:
    name: str
    pid: int
    started: float  # harness/core/process_start.py: survives a wall-clock step

    def alive(self) -> bool:
        return is_running_as(self.pid, self.started)


class RoleTable:
    """The launcher and the roles it started: finds each role's pid from the launcher's pid
    files and says which ones have exited."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.launcher: psutil.Popen | None = None  # the launcher script, once spawned
        self.known: dict[str, RoleProcess] = {}
        self._started: list[str] | None = None  # what roles.started said, once it said all
        self._system_ports: dict[str, int] = {}  # each worker's, once its adapter recorded it

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

    def recorded_exit_code(self, role: str, grace_s: float = EXIT_RECORD_GRACE_S) -> int | None:
        """`exit_code`, waiting up to `grace_s` for the launcher to write it: a role's pid is
        gone before the launcher's `wait -n` returns and writes NAME.exit, so a poll that sees
        the death first would otherwise read no code."""
        deadline = time.monotonic() + grace_s
        while (code := self.exit_code(role)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def owner_of(self, pid: int | None) -> str:
        """'role prefill (pid 123)' if `pid` is one of ours (or a child of one), else the pid."""
        if pid is None:
            return "an unknown process"
        name = self.role_holding(pid)
        if name is not None:
            return f"role '{name}' (pid {pid})"
        return f"pid {pid}, not a role of this topology"

    def role_holding(self, pid: int | None) -> str | None:
        """The role whose process (or a child of it) is `pid`, if one of ours."""
        for name, proc in self.known.items():
            with contextlib.suppress(psutil.Error):
                tree = {proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(True))}
                if pid in tree:
                    return name
        return None

    def received_system_ports(self) -> dict[str, int]:
        """{worker: the system port it was started with}, as the role adapter recorded it at
        exec (NAME.adapter.json): where its /health and /metrics really are."""
        for role in self.plan.workers:
            if role.name in self._system_ports:
                continue
            record = adapter_record(self.plan.log_dir, role.name)
            with contextlib.suppress(ValueError, KeyError, TypeError):
                ports = record["ports"] if record else None
                if isinstance(ports, dict):
                    self._system_ports[role.name] = int(ports[SYSTEM_PORT_ENV])
        return dict(self._system_ports)

    def logged_exception(self) -> tuple[str, str] | None:
        """(role, its own words: own_words.py) of the role whose log was written last among
        those that logged a failure, if any did: what a worker logs while the requests it
        serves fail 5xx."""
        found = []
        for role in self.plan.roles:
            path = self.log_path(role.name)
            with contextlib.suppress(OSError):
                words = own_words(path.read_bytes()[-LOG_SCAN_BYTES:].decode(errors="replace"))
                if words is not None:
                    found.append((path.stat().st_mtime, role.name, str(words)))
        if not found:
            return None
        _, name, line = max(found)
        return name, line

    def missing(self) -> list[str]:
        return [r.name for r in self.plan.roles if r.name not in self.known]

    def never_started(self) -> tuple[list[str], list[str]] | None:
        """Once the launcher says it started all its roles (its roles.started file): the
        declared roles it did not start, and the ones it did. None while it is still starting
        them."""
        if self._started is not None:
            return [], self._started
        try:
            started = (self.plan.log_dir / STARTED_FILE).read_text().split()
        except FileNotFoundError:
            return None
        missing = [r.name for r in self.plan.roles if r.name not in started]
        if not missing:
            self._started = started
        return missing, started
