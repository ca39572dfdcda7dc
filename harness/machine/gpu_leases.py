"""GPU bytes, leased machine-wide.

- `GpuLeaseBroker`: machine-wide GPU leases in bytes: a topology asks for its roles' bytes per
  GPU position, and is admitted only where every position fits. A device's room is
  `min(total - bytes leased on it, free bytes NVML reports now)`: memory another process holds
  is not free, and memory a leased topology has not allocated yet is not free either. So the
  bytes leased on a card never exceed what it has, whatever starts first. Leases live in a
  `LeaseFile`, shared by every xdist worker and checkout.
- `take_gpus`, `GpuSlot`: GPUs for one GPU-tier topology: its memory plan leased in bytes before
  launch, the launchers' memory variables derived from the cards it got, its memory checked
  returned after teardown."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
from harness.machine.lease_file import HeldLease, LeaseFile, NewLease, OwnedLease, registry_path
from harness.machine.memory_plan import Deployable, MemoryPlan, launcher_memory_env, plan_memory

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
                GpuLeaseRecord(**new.fields(tag), gpu_index=index, bytes=need, leased_at=now)
                for index, need in zip(indices, needs, strict=True)
            )
        used = {d.index: d.total_bytes - d.free_bytes for d in devices}
        return GpuLease(
            indices, needs, new.lease_id, self, dict(reserved), {i: used[i] for i in set(indices)}
        )


def reserved_bytes(records: Iterable[GpuLeaseRecord]) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for record in records:
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

    def wait_returned(self) -> None:
        """Wait (bounded) until the lease's cards hold what they held at grant again, neighbours'
        new leases aside: after the topology stopped, or after whatever ran on the lease before
        its first role (the engine alone, cases/engine_first.py). Raises GpuMemoryNotReturned."""
        if self.inventory.simulated:
            return
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

    def release(self) -> None:
        """Wait (bounded) for this lease's share of GPU memory to come back, then give it back."""
        try:
            self.wait_returned()
        except GpuMemoryNotReturned as exc:
            raise TopologyFailure(Cause.TEARDOWN_UNCLEAN, str(exc)) from exc
        finally:
            self.lease.release()


def take_gpus(profile: Deployable, tag: str) -> GpuSlot:
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
