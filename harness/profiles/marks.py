"""The pytest mark names a serve case carries, as plain strings (shared by the plugin and CLI)."""

from __future__ import annotations

from harness.profiles import CADENCE_MARKS, CaseSpec, Profile, Tier


def mark_names(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """E.g. ``["post_merge", "multimodal", "vllm", "gpu_1"]`` for agg Qwen3-VL on the GPU tier:
    profile marks, then the tier's, then the case's; stack; ``gpu_N`` or ``cpu``."""
    spec = profile.tier(tier)
    tier_marks = spec.marks if spec else []
    names = list(dict.fromkeys([*profile.marks, *tier_marks, *case.marks]))
    names += ["multimodal", profile.stack.removeprefix("dynamo-")]
    device = "xpu" if profile.accelerator == "xpu" else "gpu"
    names.append(f"{device}_{profile.gpu.gpus}" if tier == "gpu" else "cpu")
    return names


def cadence_marks(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """Only the cadence marks (pre_merge / post_merge / nightly), in mark order."""
    return [m for m in mark_names(profile, tier, case) if m in CADENCE_MARKS]
