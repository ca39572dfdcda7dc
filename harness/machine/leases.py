"""Machine-wide leases, each owned by a live process: the lease file, GPU bytes and ports.

- `LeaseFile`: a machine-wide JSON file of leases, each owned by a process; dead owners' leases
  vanish on read. Shared by the port and GPU registries: every read-modify-write happens under
  one `FileLock`, and a lease whose owner (pid + start time, harness/core/process_start.py) is
  no longer running is dropped at that moment.
- `GpuLeaseBroker`: machine-wide GPU leases in bytes: a topology asks for its roles' bytes per
  GPU position, and is admitted only where every position fits. A device's room is
  `min(total - bytes leased on it, free bytes NVML reports now)`: memory another process holds
  is not free, and memory a leased topology has not allocated yet is not free either. So the
  bytes leased on a card never exceed what it has, whatever starts first. Leases live in a
  `LeaseFile`, shared by every xdist worker and checkout.
- `take_gpus`, `GpuSlot`: GPUs for one GPU-tier topology: its memory plan leased in bytes before
  launch, the launchers' memory variables derived from the cards it got, its memory checked
  returned after teardown.
- `PortRegistry`: machine-wide port leases: every xdist worker and checkout draws 127.0.0.1
  ports from one `LeaseFile`. A port is handed out only if no live lease holds it and a bind on
  127.0.0.1 succeeds right now."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Self, TypeVar

import psutil
from filelock import FileLock
from pydantic import BaseModel, TypeAdapter

from harness.core.process_start import is_running_as, process_started
from harness.core.verdict import Cause, TopologyFailure
from harness.machine.gpus import (
    GIB,
    MIB,
    GpuDevice,
    GpuInventory,
    GpuMemoryNotReturned,
    NvmlMemoryProbe,
    wait_memory_returned,
)
from harness.machine.memory_plan import MemoryPlan, launcher_memory_env, plan_memory
from harness.profiles import Profile

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

    def fields(self, tag: str) -> dict[str, object]:
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


def owned_by(lease_id: str, owner: int, created: float, tag: str) -> dict[str, object]:
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
        self._records = TypeAdapter(list[record_type])  # type: ignore[valid-type]
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
            return self._records.validate_json(text)
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


GPU_REGISTRY_ENV = "HARNESS_GPU_REGISTRY"


def gpu_registry_file() -> Path:
    """The machine's GPU lease file: $HARNESS_GPU_REGISTRY, else /tmp/serve-harness/gpus.json."""
    return registry_path(GPU_REGISTRY_ENV, "gpus.json")


class GpuLeaseRecord(OwnedLease):
    """Bytes reserved on one GPU by one lease, as stored in the registry file."""

    gpu_index: int
    bytes: int
    leased_at: float


class GpuUnavailable(Exception):
    """A request this machine cannot satisfy even when idle; the message says by how much."""


class GpuLeaseTimeout(TimeoutError):
    """The broker could not admit a request within its timeout."""


def gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def room(device: GpuDevice, reserved: int) -> int:
    return min(device.total_bytes - reserved, device.free_bytes)


def place(
    devices: Sequence[GpuDevice], reserved: dict[int, int], needs: Sequence[int]
) -> list[int] | None:
    """A distinct device for each position, or None if they do not all fit now.

    Largest need first, each into the device with the least room that still holds it (best fit
    keeps whole GPUs free for multi-GPU topologies). Example: two 80 GiB GPUs, 60 GiB leased on
    GPU 0, needs [16 GiB] -> [0]; needs [16 GiB, 70 GiB] -> [0, 1].
    """
    if len(needs) > len(devices):
        return None
    free = {d.index: room(d, reserved.get(d.index, 0)) for d in devices}
    placed: dict[int, int] = {}
    for position in sorted(range(len(needs)), key=lambda p: -needs[p]):
        fitting = [i for i, r in free.items() if r >= needs[position] and i not in placed.values()]
        if not fitting:
            return None
        placed[position] = min(fitting, key=lambda i: free[i])
    return [placed[p] for p in range(len(needs))]


def shortfall(
    devices: Sequence[GpuDevice], needs: Sequence[int], refused: Sequence[str] = ()
) -> str | None:
    """Why `needs` cannot be placed on these devices as they are now (nothing of ours leased), or
    None. E.g. 'needs 26.1 GiB on one GPU; largest free is 23.6 GiB'."""
    if place(devices, {}, needs) is not None:
        return None
    why = "; ".join(refused)
    if len(needs) > len(devices):
        shape = ", ".join(gib(n) for n in needs)
        return f"needs {len(needs)} GPU(s) ({shape}); {len(devices)} visible" + (
            f" ({why})" if why else ""
        )
    largest = max(d.free_bytes for d in devices)
    worst = max(needs)
    if worst > largest:
        return f"needs {gib(worst)} on one GPU; largest free is {gib(largest)}"
    frees = sorted((d.free_bytes for d in devices), reverse=True)
    return (
        f"needs {', '.join(gib(n) for n in sorted(needs, reverse=True))} on {len(needs)} "
        f"GPU(s); free: {', '.join(gib(f) for f in frees)}"
    )


@dataclass
class GpuLease(HeldLease):
    """GPUs reserved for one topology: `indices[p]` is the device of position p."""

    indices: list[int]
    needs: list[int]
    lease_id: str
    broker: GpuLeaseBroker = field(repr=False)
    # what other leases held on each device when this one was granted, and what NVML said
    others_at_grant: dict[int, int] = field(default_factory=dict)
    used_at_grant: dict[int, int] = field(default_factory=dict)
    released: bool = False

    @property
    def cuda_visible_devices(self) -> str:
        """E.g. "0,2" (NVML indices; `env()` sets CUDA_DEVICE_ORDER so CUDA agrees). A device
        that holds two positions appears once: the launcher's `gpu_for` picks by position."""
        return ",".join(str(i) for i in dict.fromkeys(self.indices))

    def env(self) -> dict[str, str]:
        return {
            "CUDA_VISIBLE_DEVICES": self.cuda_visible_devices,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }

    def _give_back(self) -> None:
        self.broker.release(self)


class GpuLeaseBroker:
    """Admits GPU requests against one machine-wide registry ($HARNESS_GPU_REGISTRY)."""

    def __init__(self, inventory: GpuInventory, path: Path | None = None) -> None:
        self.inventory = inventory
        self.path = path or gpu_registry_file()
        self._file = LeaseFile(self.path, GpuLeaseRecord)

    def lease(
        self,
        needs: Sequence[int],
        owner_pid: int | None = None,
        timeout_s: float = 3600.0,
        tag: str = "",
    ) -> GpuLease:
        """Wait (polling with backoff) until every position's bytes fit a distinct device.
        Raises GpuUnavailable at once if the machine could never hold them."""
        reason = shortfall(self.inventory.devices, needs, self.inventory.refused)
        if reason is not None:
            raise GpuUnavailable(f"{tag or 'request'} {reason}")
        new = NewLease.for_owner(owner_pid)
        deadline = time.monotonic() + timeout_s
        delay_s = 0.02
        while True:
            lease = self._try_lease(list(needs), new, tag)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                holders = ", ".join(
                    f"GPU {r.gpu_index}: {gib(r.bytes)} by pid {r.owner_pid} "
                    f"({r.tag or 'untagged'})"
                    for r in self.leases()
                )
                raise GpuLeaseTimeout(
                    f"{tag or 'request'}: no room for {', '.join(gib(n) for n in needs)} after "
                    f"{timeout_s:g} s; current leases in {self.path}: {holders or 'none'}"
                )
            time.sleep(min(delay_s, max(0.0, deadline - time.monotonic())))
            delay_s = min(delay_s * 2, 2.0)

    def release(self, lease: GpuLease | str) -> None:
        """Drop a lease (a `GpuLease` or its id); unknown ids are ignored."""
        self._file.release(lease if isinstance(lease, str) else lease.lease_id)

    def leases(self) -> list[GpuLeaseRecord]:
        """Live lease records (reclaiming those of dead owners)."""
        return self._file.live_records()

    def reserved_by_others(self, lease_id: str) -> dict[int, int]:
        """Bytes per device that live leases other than `lease_id` hold."""
        return reserved_bytes(r for r in self.leases() if r.lease_id != lease_id)

    def _try_lease(self, needs: list[int], new: NewLease, tag: str) -> GpuLease | None:
        devices = self.inventory.refreshed().devices
        with self._file.transaction() as records:
            reserved = reserved_bytes(records)
            indices = place(devices, reserved, needs)
            if indices is None:
                return None
            now = time.time()
            records.extend(
                GpuLeaseRecord(**new.fields(tag), gpu_index=index, bytes=need, leased_at=now)  # type: ignore[arg-type]
                for index, need in zip(indices, needs, strict=True)
            )
        used = {d.index: d.total_bytes - d.free_bytes for d in devices}
        return GpuLease(
            indices, needs, new.lease_id, self, dict(reserved), {i: used[i] for i in set(indices)}
        )


def reserved_bytes(records: object) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for record in records:  # type: ignore[attr-defined]
        out[record.gpu_index] += record.bytes
    return dict(out)


TOLERANCE = 1024 * MIB  # vLLM's own teardown check allows 2 GiB; we hold ourselves to 1
RETURN_TIMEOUT_S = 120.0
ADMISSION_TIMEOUT_S = 1800.0  # waiting for GPUs other xdist workers hold


@dataclass
class GpuSlot:
    lease: GpuLease
    plan: MemoryPlan
    inventory: GpuInventory
    memory_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**self.lease.env(), **self.memory_env}

    def release(self) -> None:
        """Wait (bounded) for this lease's share of GPU memory to come back, then give it back."""
        try:
            if not self.inventory.simulated:
                broker = self.lease.broker
                others_now = broker.reserved_by_others(self.lease.lease_id)
                before = self.lease.others_at_grant

                def allowance(index: int) -> int:
                    return max(0, others_now.get(index, 0) - before.get(index, 0))

                wait_memory_returned(
                    self.lease.indices,
                    self.lease.used_at_grant,
                    TOLERANCE,
                    RETURN_TIMEOUT_S,
                    NvmlMemoryProbe(),
                    allowance,
                )
        except GpuMemoryNotReturned as exc:
            raise TopologyFailure(Cause.TEARDOWN_UNCLEAN, str(exc)) from exc
        finally:
            self.lease.release()


def take_gpus(profile: Profile, tag: str) -> GpuSlot:
    """Wait for room for the profile's memory plan (shared safely under xdist). Raises
    GpuUnavailable when this machine could never hold it."""
    inventory = GpuInventory.detect()
    plan = plan_memory(profile)
    broker = GpuLeaseBroker(inventory)
    lease = broker.lease(plan.per_device(), tag=tag, timeout_s=ADMISSION_TIMEOUT_S)
    totals = [inventory.device(i).total_bytes for i in lease.indices]
    frees = [  # what this topology may count on at grant: free now, less neighbours' leases
        min(total - lease.used_at_grant[i], total - lease.others_at_grant.get(i, 0))
        for i, total in zip(lease.indices, totals, strict=True)
    ]
    memory_env = launcher_memory_env(plan, totals, frees)
    return GpuSlot(lease, plan, inventory, memory_env)


PORT_REGISTRY_ENV = "HARNESS_PORT_REGISTRY"


def port_registry_file() -> Path:
    """The machine's port lease file: $HARNESS_PORT_REGISTRY, else /tmp/serve-harness/ports.json."""
    return registry_path(PORT_REGISTRY_ENV, "ports.json")


BIND_HOST = "127.0.0.1"


class PortLeaseRecord(OwnedLease):
    """One leased port as stored in the registry file."""

    port: int
    name: str
    leased_at: float


class PortRangeExhausted(RuntimeError):
    """Not enough free ports in the registry's range."""


def port_is_bindable(port: int) -> bool:
    """True if a socket can bind 127.0.0.1:`port` now (no listener, holder or TIME_WAIT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((BIND_HOST, port))
        except OSError:
            return False
    return True


@dataclass
class PortLease(HeldLease):
    """Ports leased under one id, by name (e.g. {"frontend": 20113, "encode": 20114})."""

    ports: dict[str, int]
    lease_id: str
    registry: PortRegistry = field(repr=False)
    released: bool = False

    def _give_back(self) -> None:
        self.registry.release(self)


class PortRegistry:
    """Port leases in [low, high] recorded in a JSON file shared by every process on the machine.

    Default file: $HARNESS_PORT_REGISTRY, else /tmp/serve-harness/ports.json.
    """

    def __init__(self, path: Path | None = None, low: int = 20000, high: int = 30000) -> None:
        if not 1024 <= low <= high <= 65535:
            raise ValueError(f"port range {low}-{high} must lie within 1024-65535 with low <= high")
        self.path = path or port_registry_file()
        self.low = low
        self.high = high
        self._file = LeaseFile(self.path, PortLeaseRecord)

    def lease(
        self,
        names: list[str],
        owner_pid: int | None = None,
        tag: str = "",
        runs: Sequence[Sequence[str]] = (),
    ) -> PortLease:
        """Lease one port per name for `owner_pid` (default: this process), all or nothing.
        Each of `runs` is leased as consecutive ports, its names in order (a launcher that
        offsets ports from a base, `$((BASE + i - 1))`, stays inside its lease)."""
        every = [*names, *(name for run in runs for name in run)]
        if len(set(every)) != len(every):
            raise ValueError(f"port names must be distinct, got {every}")
        new = NewLease.for_owner(owner_pid)
        with self._file.transaction() as records:
            taken = {r.port for r in records}
            leased: dict[str, int] = {}
            busy = 0
            for run in runs:
                start = self._pick_run(len(run), taken)
                if start is None:
                    raise PortRangeExhausted(
                        f"no {len(run)} consecutive free ports for {', '.join(run)} in "
                        f"{BIND_HOST}:{self.low}-{self.high} ({len(taken)} leased in "
                        f"{self.path}). Release leases, widen low/high, or point "
                        "HARNESS_PORT_REGISTRY at another file."
                    )
                leased.update({name: start + i for i, name in enumerate(run)})
                taken |= set(range(start, start + len(run)))
            ports, busy = self._pick_free(len(names), taken)
            if len(ports) < len(names):
                raise PortRangeExhausted(
                    f"requested {len(names)} ports ({', '.join(names)}) but only {len(ports)} "
                    f"are free in {BIND_HOST}:{self.low}-{self.high}: {len(taken)} leased in "
                    f"{self.path}, {busy} held by other processes. Release leases, widen "
                    "low/high, or point HARNESS_PORT_REGISTRY at another file."
                )
            leased.update(zip(names, ports, strict=True))
            now = time.time()
            records.extend(
                PortLeaseRecord(**new.fields(tag), port=port, name=name, leased_at=now)  # type: ignore[arg-type]
                for name, port in leased.items()
            )
        return PortLease({name: leased[name] for name in every}, new.lease_id, self)

    def release(self, lease: PortLease | str) -> None:
        """Drop every record of a lease (a `PortLease` or its id); unknown ids are ignored."""
        lease_id = lease if isinstance(lease, str) else lease.lease_id
        self._file.release(lease_id)

    def leases(self) -> list[PortLeaseRecord]:
        """Live lease records (reclaiming those of dead owners)."""
        return self._file.live_records()

    def _pick_free(self, count: int, taken: set[int]) -> tuple[list[int], int]:
        """Up to `count` bindable untaken ports scanning from a random start; also busy count."""
        span = self.high - self.low + 1
        start = random.randrange(span)
        picked: list[int] = []
        busy = 0
        for offset in range(span):
            port = self.low + (start + offset) % span
            if port in taken:
                continue
            if port_is_bindable(port):
                picked.append(port)
                if len(picked) == count:
                    break
            else:
                busy += 1
        return picked, busy

    def _pick_run(self, count: int, taken: set[int]) -> int | None:
        """The first port of `count` consecutive bindable untaken ports, from a random start."""
        span = self.high - self.low + 2 - count
        if span <= 0:
            return None
        start = random.randrange(span)
        for offset in range(span):
            first = self.low + (start + offset) % span
            run = range(first, first + count)
            if not taken.intersection(run) and all(port_is_bindable(p) for p in run):
                return first
        return None
