"""The GPU lease the audit pretends to hold: idle cards of the profile's claimed size."""

from __future__ import annotations

from harness.profiles import Profile
from harness.resources.memory_plan import launcher_memory_env, plan_memory

# Device indices the audit pretends to lease (no GPU is touched): position p -> FIRST_FAKE_GPU + p.
FIRST_FAKE_GPU = 10


def simulated_gpu_env(profile: Profile) -> dict[str, str]:
    """What a GPU lease on idle cards of the claimed size would hand the launcher."""
    plan = plan_memory(profile)
    # as many cards as the runner class has, so a launcher that puts a role past the plan's
    # GPUs is named by the placement check rather than stopped by gpu_for
    positions = max(plan.devices, profile.gpu.gpus)
    totals = [plan.card_bytes] * positions
    env = launcher_memory_env(plan, totals, totals)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(FIRST_FAKE_GPU + p) for p in range(positions))
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env
