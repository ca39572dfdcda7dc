"""The GPUs this machine offers the harness, and their memory in bytes.

`GpuInventory`: NVML's devices, restricted to what the runner makes visible, or a simulated
inventory ($HARNESS_GPUS) for scheduling tests.

- `CUDA_VISIBLE_DEVICES` (else `NVIDIA_VISIBLE_DEVICES`, unless `all`) restricts the inventory:
  indices or `GPU-…` UUIDs; `none`/`void`/empty means no GPU. A runner that hands the job two
  GPUs of eight gets leases on those two only.
- A GPU in MIG mode is refused with the reason (the harness leases whole GPUs by index); so is a
  `MIG-…` UUID in the visible list.
- Sizes are bytes as the card reports them: an RTX 4090 "24 GB" card has 24,564 MiB, and the
  memory plan is compared against that, never against a rounded figure.

`wait_memory_returned`: after a topology stops, did its GPU memory come back? Compared against
the lease's own share, so a neighbour topology that started on the same GPU meanwhile does not
count against it."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import psutil

GPUS_ENV = "HARNESS_GPUS"
VISIBLE_ENVS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
GIB = 2**30
MIB = 2**20
_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+(?:\.\d+)?)\s*(GiB|MiB)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as the inventory saw it."""

    index: int  # NVML index; leases pin it with CUDA_DEVICE_ORDER=PCI_BUS_ID
    name: str
    total_bytes: int
    free_bytes: int
    uuid: str = ""

    def describe(self) -> str:
        return (
            f"{self.index}: {self.name}, {self.free_bytes / GIB:.1f} of "
            f"{self.total_bytes / GIB:.1f} GiB free"
        )


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs the harness may lease, and why any others were left out."""

    devices: tuple[GpuDevice, ...]
    refused: tuple[str, ...] = ()
    simulated: bool = False

    @classmethod
    def from_spec(cls, spec: str) -> GpuInventory:
        """`"4x80"` -> four idle 80 GiB GPUs; `"1x24564MiB"` -> one RTX 4090-sized card."""
        match = _SPEC.match(spec)
        if not match:
            raise ValueError(f"{GPUS_ENV}={spec!r} is not COUNTxSIZE[GiB|MiB], e.g. 4x80")
        count, size = int(match[1]), float(match[2])
        unit = MIB if (match[3] or "GiB").lower() == "mib" else GIB
        total = int(size * unit)
        label = f"simulated-{match[2]}{match[3] or 'GiB'}"
        devices = tuple(GpuDevice(i, label, total, total, f"GPU-sim-{i}") for i in range(count))
        return cls(devices, simulated=True)

    @classmethod
    def from_nvml(cls, nvml: Any = None) -> GpuInventory:
        """Query NVML (nvidia-ml-py); raises pynvml.NVMLError if there is no driver."""
        with _nvml_session(nvml) as lib:
            devices, refused = [], []
            for index in range(lib.nvmlDeviceGetCount()):
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                name = _text(lib.nvmlDeviceGetName(handle))
                if _mig_enabled(lib, handle):
                    refused.append(
                        f"GPU {index} ({name}) is in MIG mode: the harness leases whole GPUs; "
                        f"disable MIG (nvidia-smi -i {index} -mig 0) or run on a non-MIG GPU"
                    )
                    continue
                memory = lib.nvmlDeviceGetMemoryInfo(handle)
                uuid = _text(lib.nvmlDeviceGetUUID(handle))
                devices.append(GpuDevice(index, name, int(memory.total), int(memory.free), uuid))
        return cls(tuple(devices), tuple(refused))

    @classmethod
    def detect(cls) -> GpuInventory:
        """$HARNESS_GPUS if set, else NVML, else no GPUs; restricted to the visible devices."""
        return cls.detect_with_source()[0]

    @classmethod
    def detect_with_source(cls) -> tuple[GpuInventory, str]:
        """The inventory and where it came from ($HARNESS_GPUS or NVML), or why NVML gave none."""
        spec = os.environ.get(GPUS_ENV)
        if spec:
            inventory, source = cls.from_spec(spec), f"${GPUS_ENV} (simulated)"
        else:
            try:
                inventory = cls.from_nvml()
            except Exception as exc:  # pynvml raises NVMLError subclasses, or ImportError
                return cls(()), f"{type(exc).__name__}: {exc}"
            source = "NVML" if inventory.devices or inventory.refused else "NVML reports 0 devices"
        visible = visible_selector()
        if visible is not None:
            inventory = inventory.restricted_to(*visible)
            source += f", restricted by {visible[0]}={visible[1]}"
        return inventory, source

    def restricted_to(self, env_name: str, selector: str) -> GpuInventory:
        """Only the devices `selector` names (indices or GPU- UUIDs, as CUDA reads them)."""
        wanted = [s.strip() for s in selector.split(",") if s.strip()]
        if not wanted or wanted[0].lower() in ("none", "void", "-1"):
            return GpuInventory((), (*self.refused, f"{env_name}={selector!r} hides every GPU"))
        kept, refused = [], list(self.refused)
        for token in wanted:
            if token.upper().startswith("MIG-"):
                refused.append(
                    f"{env_name} names MIG instance {token}: the harness leases whole GPUs; "
                    "give it a full GPU"
                )
                continue
            match = [
                d
                for d in self.devices
                if (token.isdigit() and d.index == int(token)) or d.uuid == token
            ]
            if not match:
                refused.append(f"{env_name} names {token}, which is not among the GPUs seen")
            kept += [d for d in match if d not in kept]
        return GpuInventory(tuple(kept), tuple(refused), self.simulated)

    def refreshed(self, nvml: Any = None) -> GpuInventory:
        """The same devices with free memory read now (a simulated inventory never changes)."""
        if self.simulated or not self.devices:
            return self
        with _nvml_session(nvml) as lib:
            fresh = []
            for device in self.devices:
                memory = lib.nvmlDeviceGetMemoryInfo(lib.nvmlDeviceGetHandleByIndex(device.index))
                fresh.append(replace(device, free_bytes=int(memory.free)))
        return replace(self, devices=tuple(fresh))

    def device(self, index: int) -> GpuDevice:
        for device in self.devices:
            if device.index == index:
                return device
        raise KeyError(f"GPU {index} is not in this inventory")


def visible_selector() -> tuple[str, str] | None:
    """(variable, value) of the runner's GPU restriction, or None (all GPUs)."""
    for name in VISIBLE_ENVS:
        value = os.environ.get(name)
        if value is not None and value.strip().lower() != "all":
            return name, value
    return None


def _mig_enabled(lib: Any, handle: Any) -> bool:
    try:
        current, _pending = lib.nvmlDeviceGetMigMode(handle)
    except Exception:  # NVMLError_NotSupported on GPUs without MIG
        return False
    return bool(current == getattr(lib, "NVML_DEVICE_MIG_ENABLE", 1))


@contextlib.contextmanager
def _nvml_session(nvml: Any = None) -> Iterator[Any]:
    if nvml is None:
        import pynvml

        nvml = pynvml
    nvml.nvmlInit()
    try:
        yield nvml
    finally:
        nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
