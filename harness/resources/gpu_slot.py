"""GPUs for one GPU-tier topology: leased before launch, memory checked returned after teardown."""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import Profile
from harness.resources.gpus import (
    GPUS_ENV,
    GpuInventory,
    GpuLease,
    GpuLeaseBroker,
    GpuMemoryNotReturned,
    NvmlMemoryProbe,
    wait_memory_returned,
)

TOLERANCE_MIB = 1024.0  # vLLM's own teardown check allows 2 GiB; we hold ourselves to 1
RETURN_TIMEOUT_S = 120.0
ADMISSION_TIMEOUT_S = 1800.0  # waiting for GPUs other xdist workers hold


@dataclass
class GpuSlot:
    lease: GpuLease
    baseline_mib: dict[int, float] | None  # None: simulated inventory, nothing to measure

    def env(self) -> dict[str, str]:
        return self.lease.env()

    def release(self) -> None:
        """Wait (bounded) for the GPUs' memory to come back, then give them back."""
        try:
            if self.baseline_mib is not None:
                wait_memory_returned(
                    self.lease.indices, self.baseline_mib, TOLERANCE_MIB, RETURN_TIMEOUT_S
                )
        except GpuMemoryNotReturned as exc:
            raise TopologyFailure(Cause.TEARDOWN_UNCLEAN, str(exc)) from exc
        finally:
            self.lease.release()


def take_gpus(profile: Profile, tag: str) -> GpuSlot:
    """Wait for the GPUs and VRAM the profile's GPU tier needs (shared safely under xdist)."""
    broker = GpuLeaseBroker(GpuInventory.detect())
    spec = profile.gpu
    lease = broker.acquire(max(spec.gpus, 1), spec.vram_gib, tag=tag, timeout_s=ADMISSION_TIMEOUT_S)
    if os.environ.get(GPUS_ENV):
        return GpuSlot(lease, None)
    probe = NvmlMemoryProbe()
    return GpuSlot(lease, {i: probe.used_mib(i) for i in lease.indices})
