"""GPUs for one GPU-tier topology: its memory plan leased in bytes before launch, the launchers'
memory variables derived from the cards it got, its memory checked returned after teardown."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import Profile
from harness.resources.gpu_inventory import MIB, GpuInventory
from harness.resources.gpu_leases import GpuLease, GpuLeaseBroker
from harness.resources.gpu_memory import (
    GpuMemoryNotReturned,
    NvmlMemoryProbe,
    wait_memory_returned,
)
from harness.resources.memory_plan import MemoryPlan, launcher_memory_env, plan_memory

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
                    self.lease.indices, self.lease.used_at_grant, TOLERANCE, RETURN_TIMEOUT_S,
                    NvmlMemoryProbe(), allowance,
                )  # fmt: skip
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
