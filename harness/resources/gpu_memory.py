"""After a topology stops: did its GPU memory come back? Compared against the lease's own share,
so a neighbour topology that started on the same GPU meanwhile does not count against it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import psutil

from harness.resources.gpu_inventory import MIB, _nvml_session


class GpuMemoryProbe(Protocol):
    """Reads per-GPU memory use and who holds it."""

    def used_bytes(self, index: int) -> int: ...

    def holders(self, index: int) -> list[str]: ...


class NvmlMemoryProbe:
    """`GpuMemoryProbe` backed by NVML."""

    def used_bytes(self, index: int) -> int:
        with _nvml_session() as nvml:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used)

    def holders(self, index: int) -> list[str]:
        with _nvml_session() as nvml:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return [describe_holder(p.pid, p.usedGpuMemory) for p in procs]


def describe_holder(pid: int, used_bytes: int | None) -> str:
    used = f"{used_bytes / MIB:.0f} MiB" if used_bytes else "? MiB"
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())[:120]
    except psutil.Error:
        cmdline = "not visible from here"
    return f"pid {pid} ({cmdline}) {used}"


class GpuMemoryNotReturned(RuntimeError):
    """GPU memory stayed above its baseline after a topology stopped."""


def wait_memory_returned(
    indices: Iterable[int],
    baseline: Mapping[int, int],
    tolerance: int,
    timeout_s: float,
    probe: GpuMemoryProbe | None = None,
    allowance: Callable[[int], int] = lambda index: 0,
) -> None:
    """Wait until each GPU's used bytes are back within `tolerance` of `baseline` plus
    `allowance(index)`: what neighbours leased on that GPU since the baseline was taken."""
    probe = probe or NvmlMemoryProbe()
    pending = list(dict.fromkeys(indices))
    deadline = time.monotonic() + timeout_s
    while True:
        used = {i: probe.used_bytes(i) for i in pending}
        limit = {i: baseline.get(i, 0) + allowance(i) + tolerance for i in pending}
        pending = [i for i in pending if used[i] > limit[i]]
        if not pending:
            return
        if time.monotonic() >= deadline:
            problems = "; ".join(
                f"GPU {i}: {used[i] / MIB:.0f} MiB used vs {limit[i] / MIB:.0f} MiB allowed "
                f"(baseline {baseline.get(i, 0) / MIB:.0f} + neighbours' new leases "
                f"{allowance(i) / MIB:.0f} + {tolerance / MIB:.0f}), held by "
                + (", ".join(probe.holders(i)) or "nobody NVML lists")
                for i in pending
            )
            raise GpuMemoryNotReturned(f"GPU memory not returned after {timeout_s:g} s: {problems}")
        time.sleep(0.2)
