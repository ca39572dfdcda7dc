"""The tier this machine runs: GPU when NVML sees a device, else CPU (overridable: --tier, and
at the edges HARNESS_TIER: core/settings.py)."""

from __future__ import annotations

from typing import cast

from harness.machine.gpus import GpuInventory
from harness.profiles import Tier


def detect_tier(requested: str = "auto", gpus: int | None = None) -> Tier:
    """`gpus`: the visible GPU count if the caller already has it (NVML is not asked again)."""
    if requested in ("cpu", "gpu"):
        return cast(Tier, requested)
    if requested != "auto":
        raise ValueError(f"--tier must be auto, cpu or gpu, not {requested!r}")
    return "gpu" if (len(GpuInventory.detect().devices) if gpus is None else gpus) > 0 else "cpu"
