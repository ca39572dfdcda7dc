"""Machine-wide leases, each owned by a live process: the lease file both registries share.

`LeaseFile`: a machine-wide JSON file of leases, each owned by a process; dead owners' leases
vanish on read. Every read-modify-write happens under one `FileLock`, and a lease whose owner
(pid + start time, harness/core/process_start.py) is no longer running is dropped at that
moment. `HeldLease`: what a registry hands out, released once."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Self, TypedDict, TypeVar

import psutil
from filelock import FileLock
from pydantic import BaseModel

from harness.core.process_start import is_running_as, process_started

LOCK_TIMEOUT_S = 60.0
LOCK_POLL_S = 0.002
# Where the machine-wide registries live unless their variable names another file: one place
# every session on the machine (and every container `harness docker` starts) reads.
REGISTRY_DIR = Path("/tmp/serve-harness")


def registry_path(env_var: str, file_name: str) -> Path:
    """$env_var if set, else REGISTRY_DIR / file_name (e.g. HARNESS_PORT_REGISTRY, ports.json)."""
    return Path(os.environ.get(env_var) or REGISTRY_DIR / file_name)


@dataclass(frozen=True)
class NewLease:
    """Who a lease being made belongs to: its id and its owner (pid and start time)."""

    lease_id: str
    owner_pid: int
    owner_started: float

    @classmethod
    def for_owner(cls, owner_pid: int | None) -> NewLease:
        """A new lease for `owner_pid` (default: this process)."""
        owner = owner_pid if owner_pid is not None else os.getpid()
        return cls(uuid.uuid4().hex, owner, owner_start(owner))

    def fields(self, tag: str) -> OwnedFields:
        """The `OwnedLease` fields of each of its records."""
        return owned_by(self.lease_id, self.owner_pid, self.owner_started, tag)


class OwnedLease(BaseModel):
    """Fields every lease record has: an id shared by one lease's records, and its owner."""

    lease_id: str
    owner_pid: int
    owner_started: float
    tag: str = ""

    def owner_is_alive(self) -> bool:
        """True while the owning process (same pid and start time) runs and is not a zombie."""
        return is_running_as(self.owner_pid, self.owner_started)


LeaseT = TypeVar("LeaseT", bound=OwnedLease)


class OwnedFields(TypedDict):
    """The `OwnedLease` fields, as spread into a record type."""

    lease_id: str
    owner_pid: int
    owner_started: float
    tag: str


def owned_by(lease_id: str, owner: int, created: float, tag: str) -> OwnedFields:
    """The `OwnedLease` fields of every record of one lease (spread into a record type)."""
    return {"lease_id": lease_id, "owner_pid": owner, "owner_started": created, "tag": tag}


def owner_start(pid: int) -> float:
    """Start time (harness/core/process_start.py) of the process that will own a lease; the
    error says which pid is missing."""
    try:
        return process_started(pid)
    except psutil.NoSuchProcess as exc:
        raise ValueError(f"lease owner pid {pid} is not running") from exc


class LeaseFile(Generic[LeaseT]):
    """JSON list of `record_type` records at `path`, guarded by `<path>.lock`."""

    def __init__(self, path: Path, record_type: type[LeaseT]) -> None:
        self.path = path
        self._record_type = record_type
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(
            f"{path}.lock", timeout=LOCK_TIMEOUT_S, poll_interval=LOCK_POLL_S, thread_local=False
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[list[LeaseT]]:
        """Yield the live records under the lock; whatever the list holds on exit is written."""
        with self._lock:
            alive: dict[tuple[int, float], bool] = {}
            records = []
            for record in self._read():
                owner = (record.owner_pid, record.owner_started)
                if owner not in alive:
                    alive[owner] = record.owner_is_alive()
                if alive[owner]:
                    records.append(record)
            yield records
            self._write(records)

    def release(self, lease_id: str) -> None:
        """Drop every record of one lease; an unknown id is ignored."""
        with self.transaction() as records:
            records[:] = [r for r in records if r.lease_id != lease_id]

    def live_records(self) -> list[LeaseT]:
        """A snapshot of live records (dead owners' records are dropped from the file too)."""
        with self.transaction() as records:
            return list(records)

    def _read(self) -> list[LeaseT]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        if not text.strip():
            return []
        try:
            data = json.loads(text)
            if not isinstance(data, list):
                raise ValueError(f"a JSON list, not {type(data).__name__}")
            return [self._record_type.model_validate(item) for item in data]
        except ValueError as exc:
            raise ValueError(
                f"lease registry {self.path} is unreadable ({exc}); "
                "if no harness session is running, delete it"
            ) from exc

    def _write(self, records: list[LeaseT]) -> None:
        payload = json.dumps([r.model_dump() for r in records], indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(payload)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


class HeldLease:
    """A lease a caller holds: `release()` gives it back once; also a context manager."""

    released: bool

    def _give_back(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Give the lease back (idempotent)."""
        if not self.released:
            self._give_back()
            self.released = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
