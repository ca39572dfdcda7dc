"""The pytest mark names a serve case carries, as plain strings (shared by the plugin and CLI)."""

from __future__ import annotations

from harness.profiles import CADENCE_MARKS, CaseSpec, Profile, Tier


def mark_names(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """E.g. ``["post_merge", "multimodal", "vllm", "gpu_1"]`` for agg Qwen3-VL on the GPU tier:
    profile marks, then the tier's, then the case's (a case's cadence mark replaces theirs, as
    upstream's MmCase marks do); stack; ``gpu_N`` or ``cpu``."""
    spec = profile.tier(tier)
    tier_marks = spec.marks if spec else []
    inherited = [*profile.marks, *tier_marks]
    if any(m in CADENCE_MARKS for m in case.marks):  # a case's cadence replaces the profile's
        inherited = [m for m in inherited if m not in CADENCE_MARKS]
    names = list(dict.fromkeys([*inherited, *case.marks]))
    names += ["multimodal", profile.stack.removeprefix("dynamo-")]
    device = "xpu" if profile.accelerator == "xpu" else "gpu"
    names.append(f"{device}_{profile.gpu.gpus}" if tier == "gpu" else "cpu")
    return names


def cadence_marks(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """Only the cadence marks (pre_merge / post_merge / nightly), in mark order."""
    return [m for m in mark_names(profile, tier, case) if m in CADENCE_MARKS]
