"""Which tier this machine runs: GPU when NVML sees a device, else CPU (overridable)."""

from __future__ import annotations

import importlib.util
import os

from harness.profiles import Tier
from harness.resources.gpu_inventory import GpuInventory


def detect_tier(requested: str = "auto", gpus: int | None = None) -> Tier:
    """`gpus`: the visible GPU count if the caller already has it (NVML is not asked again)."""
    requested = os.environ.get("HARNESS_TIER", requested) if requested == "auto" else requested
    if requested in ("cpu", "gpu"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"--tier must be auto, cpu or gpu, not {requested!r}")
    return "gpu" if (len(GpuInventory.detect().devices) if gpus is None else gpus) > 0 else "cpu"


STACK_ENGINE = {"dynamo-vllm": "vllm", "dynamo-sglang": "sglang"}


def missing_engine(stack: str) -> str | None:
    """Why this venv cannot serve `stack` (its engine does not import), or None. A GPU runner's
    venv holds one engine (HARNESS_GPU_STACK); the other stack's cases are skipped, not failed."""
    engine = STACK_ENGINE[stack]
    if importlib.util.find_spec(engine) is None:
        return (
            f"{engine} is not installed in this venv; a {stack} GPU runner bootstraps with "
            f"HARNESS_GPU_STACK={engine} scripts/bootstrap.sh"
        )
    return None
