"""Which tier this machine runs: GPU when NVML sees a device, else CPU (overridable)."""

from __future__ import annotations

import os

from harness.profile import Tier


def visible_gpu_count() -> int:
    if "HARNESS_GPUS" in os.environ:  # simulated inventory, e.g. "4x80"
        count, _, _ = os.environ["HARNESS_GPUS"].partition("x")
        return int(count or 0)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: all mean "no GPU here"
        return 0


def detect_tier(requested: str = "auto") -> Tier:
    requested = os.environ.get("HARNESS_TIER", requested) if requested == "auto" else requested
    if requested in ("cpu", "gpu"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"--tier must be auto, cpu or gpu, not {requested!r}")
    return "gpu" if visible_gpu_count() > 0 else "cpu"
