"""GPU tier: inventory, machine-wide GPU leases by count and VRAM, memory-return checks, ordering.

Inventory comes from NVML, or from $HARNESS_GPUS (e.g. "4x80": four 80 GiB GPUs) to simulate a
runner. Leases live in a file-locked JSON registry like the port registry; a case asks for
`count` GPUs with `vram_gib` unreserved each, and waits until the broker can admit it.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from harness.resources.lease_file import HeldLease, LeaseFile, OwnedLease, owner_create_time

GPUS_ENV = "HARNESS_GPUS"
REGISTRY_ENV = "HARNESS_GPU_REGISTRY"
DEFAULT_REGISTRY = Path("/tmp/serve-harness/gpus.json")
MIB_PER_GIB = 1024
_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as the inventory saw it (memory in MiB)."""

    index: int
    name: str
    total_mib: float
    free_mib: float


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs of this machine, real (NVML) or simulated ($HARNESS_GPUS)."""

    devices: tuple[GpuDevice, ...]

    @classmethod
    def from_spec(cls, spec: str) -> GpuInventory:
        """`"4x80"` -> four idle simulated GPUs of 80 GiB each."""
        match = _SPEC.match(spec)
        if not match:
            raise ValueError(f"{GPUS_ENV}={spec!r} is not COUNTxGIB, e.g. 4x80")
        count, gib = int(match[1]), float(match[2])
        mib = gib * MIB_PER_GIB
        return cls(tuple(GpuDevice(i, f"simulated-{gib:g}GiB", mib, mib) for i in range(count)))

    @classmethod
    def from_nvml(cls) -> GpuInventory:
        """Query NVML (nvidia-ml-py); raises pynvml.NVMLError if there is no driver."""
        with _nvml() as nvml:
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                devices.append(
                    GpuDevice(
                        index,
                        _text(nvml.nvmlDeviceGetName(handle)),
                        memory.total / 2**20,
                        memory.free / 2**20,
                    )
                )
        return cls(tuple(devices))

    @classmethod
    def detect(cls) -> GpuInventory:
        """$HARNESS_GPUS if set, else NVML, else no GPUs."""
        return cls.detect_with_source()[0]

    @classmethod
    def detect_with_source(cls) -> tuple[GpuInventory, str]:
        """The inventory and where it came from ($HARNESS_GPUS or NVML), or why NVML gave none."""
        spec = os.environ.get(GPUS_ENV)
        if spec:
            return cls.from_spec(spec), f"${GPUS_ENV} (simulated)"
        try:
            inventory = cls.from_nvml()
        except Exception as exc:  # pynvml raises NVMLError subclasses, or ImportError
            return cls(()), f"{type(exc).__name__}: {exc}"
        return inventory, "NVML" if inventory.devices else "NVML reports 0 devices"


@contextlib.contextmanager
def _nvml() -> Iterator[object]:
    import pynvml

    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def choose_gpus(
    devices: Sequence[GpuDevice], reserved_mib: Mapping[int, float], count: int, vram_mib: float
) -> list[int] | None:
    """Best fit: the `count` GPUs that can take `vram_mib` more and have least room left over.

    Packing small cases tightly keeps whole GPUs free for multi-GPU cases. None if it cannot fit
    now. Example: totals 80 GiB, reserved {0: 60, 1: 0} GiB, one 16 GiB GPU wanted -> [0].
    """
    room = {d.index: d.total_mib - reserved_mib.get(d.index, 0.0) for d in devices}
    fitting = sorted((i for i, free in room.items() if free >= vram_mib), key=lambda i: room[i])
    return sorted(fitting[:count]) if len(fitting) >= count else None


class GpuLeaseRecord(OwnedLease):
    """VRAM reserved on one GPU by one lease, as stored in the registry file."""

    gpu_index: int
    vram_mib: float
    leased_at: float


class GpuLeaseTimeout(TimeoutError):
    """The broker could not admit a request within its timeout."""


@dataclass
class GpuLease(HeldLease):
    """GPUs reserved for one case; pass `env()` to the processes that should use them."""

    indices: list[int]
    vram_mib: float
    lease_id: str
    broker: GpuLeaseBroker = field(repr=False)
    released: bool = False

    @property
    def cuda_visible_devices(self) -> str:
        """E.g. "0,2" (NVML indices; `env()` sets CUDA_DEVICE_ORDER so CUDA agrees)."""
        return ",".join(str(i) for i in self.indices)

    def env(self) -> dict[str, str]:
        """Environment that pins a process to these GPUs."""
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
        self.path = path or Path(os.environ.get(REGISTRY_ENV, DEFAULT_REGISTRY))
        self._file = LeaseFile(self.path, GpuLeaseRecord)

    def acquire(
        self,
        count: int,
        vram_gib: float,
        owner_pid: int | None = None,
        timeout_s: float = 3600.0,
        tag: str = "",
    ) -> GpuLease:
        """Wait (polling with backoff) until `count` GPUs each have `vram_gib` unreserved."""
        vram_mib = vram_gib * MIB_PER_GIB
        self._check_satisfiable(count, vram_mib, tag)
        owner = owner_pid if owner_pid is not None else os.getpid()
        created = owner_create_time(owner)
        deadline = time.monotonic() + timeout_s
        delay_s = 0.02
        while True:
            lease = self._try_acquire(count, vram_mib, owner, created, tag)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                holders = ", ".join(
                    f"GPU {r.gpu_index}: {r.vram_mib / MIB_PER_GIB:g} GiB by pid {r.owner_pid}"
                    f" ({r.tag or 'untagged'})"
                    for r in self.leases()
                )
                raise GpuLeaseTimeout(
                    f"{tag or 'request'}: no {count} GPU(s) with {vram_gib:g} GiB free each after "
                    f"{timeout_s:g} s; current leases in {self.path}: {holders or 'none'}"
                )
            time.sleep(min(delay_s, max(0.0, deadline - time.monotonic())))
            delay_s = min(delay_s * 2, 2.0)

    def release(self, lease: GpuLease | str) -> None:
        """Drop a lease (a `GpuLease` or its id); unknown ids are ignored."""
        lease_id = lease if isinstance(lease, str) else lease.lease_id
        self._file.release(lease_id)

    def leases(self) -> list[GpuLeaseRecord]:
        """Live lease records (reclaiming those of dead owners)."""
        return self._file.live_records()

    def _check_satisfiable(self, count: int, vram_mib: float, tag: str) -> None:
        devices = self.inventory.devices
        if count < 1 or count > len(devices) or vram_mib > min(d.total_mib for d in devices):
            shape = ", ".join(f"{d.index}: {d.total_mib / MIB_PER_GIB:g} GiB" for d in devices)
            raise ValueError(
                f"{tag or 'request'} wants {count} GPU(s) x {vram_mib / MIB_PER_GIB:g} GiB, "
                f"which this machine can never provide (GPUs: {shape or 'none'}; "
                f"set {GPUS_ENV} to simulate others)"
            )

    def _try_acquire(
        self, count: int, vram_mib: float, owner: int, created: float, tag: str
    ) -> GpuLease | None:
        with self._file.transaction() as records:
            reserved: dict[int, float] = {}
            for record in records:
                reserved[record.gpu_index] = reserved.get(record.gpu_index, 0.0) + record.vram_mib
            indices = choose_gpus(self.inventory.devices, reserved, count, vram_mib)
            if indices is None:
                return None
            lease_id = uuid.uuid4().hex
            now = time.time()
            records.extend(
                GpuLeaseRecord(
                    lease_id=lease_id,
                    owner_pid=owner,
                    owner_create_time=created,
                    tag=tag,
                    gpu_index=index,
                    vram_mib=vram_mib,
                    leased_at=now,
                )
                for index in indices
            )
        return GpuLease(indices, vram_mib, lease_id, self)


class GpuMemoryProbe(Protocol):
    """Reads per-GPU memory use and who holds it."""

    def used_mib(self, index: int) -> float: ...

    def holders(self, index: int) -> list[str]: ...


class NvmlMemoryProbe:
    """`GpuMemoryProbe` backed by NVML."""

    def used_mib(self, index: int) -> float:
        with _nvml() as nvml:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20

    def holders(self, index: int) -> list[str]:
        with _nvml() as nvml:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return [_describe_holder(p.pid, p.usedGpuMemory) for p in procs]


def _describe_holder(pid: int, used_bytes: int | None) -> str:
    used = f"{used_bytes / 2**20:.0f} MiB" if used_bytes else "? MiB"
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())[:120]
    except psutil.Error:
        cmdline = "not visible from here"
    return f"pid {pid} ({cmdline}) {used}"


class GpuMemoryNotReturned(RuntimeError):
    """GPU memory stayed above its baseline after a topology stopped."""


def wait_memory_returned(
    indices: Iterable[int],
    baseline_mib: Mapping[int, float],
    tolerance_mib: float,
    timeout_s: float,
    probe: GpuMemoryProbe | None = None,
) -> None:
    """Wait until each GPU's used memory is back within `tolerance_mib` of its baseline."""
    probe = probe or NvmlMemoryProbe()
    pending = list(indices)
    deadline = time.monotonic() + timeout_s
    while True:
        used = {i: probe.used_mib(i) for i in pending}
        pending = [i for i in pending if used[i] > baseline_mib.get(i, 0.0) + tolerance_mib]
        if not pending:
            return
        if time.monotonic() >= deadline:
            problems = "; ".join(
                f"GPU {i}: {used[i]:.0f} MiB used vs baseline {baseline_mib.get(i, 0.0):.0f} "
                f"MiB (+{tolerance_mib:g}), held by "
                + (", ".join(probe.holders(i)) or "nobody NVML lists")
                for i in pending
            )
            raise GpuMemoryNotReturned(f"GPU memory not returned after {timeout_s:g} s: {problems}")
        time.sleep(0.2)
