"""The tier this machine runs: GPU when NVML sees a device, else CPU (overridable: --tier,
HARNESS_TIER)."""

from __future__ import annotations

import os
from typing import cast

from harness.machine.gpus import GpuInventory
from harness.profiles import Tier


def detect_tier(requested: str = "auto", gpus: int | None = None) -> Tier:
    """`gpus`: the visible GPU count if the caller already has it (NVML is not asked again)."""
    requested = os.environ.get("HARNESS_TIER", requested) if requested == "auto" else requested
    if requested in ("cpu", "gpu"):
        return cast(Tier, requested)
    if requested != "auto":
        raise ValueError(f"--tier must be auto, cpu or gpu, not {requested!r}")
    return "gpu" if (len(GpuInventory.detect().devices) if gpus is None else gpus) > 0 else "cpu"
