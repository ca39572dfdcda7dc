"""The audit's GPU-memory checks on one captured GPU launch: the profile's roles fit the smallest
card it claims, each role lands on the GPU the profile places it on, and each engine is started
with the bytes the memory plan gives it."""

from __future__ import annotations

import os
from unittest import mock

from harness.audit.capture import Capture
from harness.audit.findings import Finding, Invocation
from harness.audit.gpu_env import FIRST_FAKE_GPU
from harness.profiles import Profile
from harness.resources.memory_plan import (
    GIB,
    MemoryPlan,
    RoleMemory,
    plan_memory,
    role_env_key,
)
from harness.resources.model_facts import config_dir

FIT_FIX = (
    "lower gpu.max_model_len / max_num_seqs, move a role to another GPU (its gpu.device and the "
    "launcher layout), or claim a larger gpu.card_gib"
)


def fit_findings(profile: Profile, plan: MemoryPlan) -> list[Finding]:
    return [
        Finding(profile.source, "+".join(r.role for r in plan.roles), misfit, FIT_FIX)
        for misfit in plan.misfits()
    ]


def placement_finding(profile: Profile, role: RoleMemory, call: Invocation) -> Finding | None:
    want = str(FIRST_FAKE_GPU + role.device)
    var = "ZE_AFFINITY_MASK" if profile.accelerator == "xpu" else "CUDA_VISIBLE_DEVICES"
    got = call.env.get(var)
    if got == want:
        return None
    return Finding(
        profile.source,
        role.role,
        f"the profile places it on GPU #{role.device} ({var}={want}), the "
        f"launcher's layout gives it {var}={got}",
        "make gpu.device match the launcher's gpu_for position under the profile's layout flags",
    )


def bytes_finding(launcher: str, role: RoleMemory, call: Invocation) -> Finding | None:
    """The engine gets the planned KV bytes: on its command line, or (Dynamo's Qwen-VL encode
    worker) in the DYN_VLLM_ENCODER_* variables its in-process vLLM reads."""
    if role.holds == "hf_model" or call.module != "dynamo.vllm":
        return None
    if role.holds == "vision_tower":
        got = call.env.get("DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES")
        where = "DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES"
        fix = "start it with env $(vllm_encoder_env ROLE)"
    else:
        got = call.flag("--kv-cache-memory-bytes")
        where = "--kv-cache-memory-bytes"
        fix = 'pass $(engine_args "$LAYOUT" ROLE SHARE) with the role\'s name'
    if got == str(role.kv_cache):
        return None
    return Finding(
        launcher,
        role.role,
        f"{where} is {got}, the memory plan gives {role.kv_cache} "
        f"(HARNESS_KV_BYTES_{role_env_key(role.role)})",
        fix,
    )


def check_memory(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    plan = plan_memory(profile)
    out = fit_findings(profile, plan)
    for role in plan.roles:
        call = cap.roles.get(role.role)
        if call is None:
            continue  # check_health names a worker that never started
        out += [f for f in (placement_finding(profile, role, call),
                            bytes_finding(launcher, role, call)) if f]  # fmt: skip
    return out


def memory_table(profiles: list[Profile]) -> list[str]:
    """One line per GPU profile: per-GPU GiB of its plan against the card it claims."""
    lines = []
    for profile in profiles:
        plan = plan_memory(profile)
        per_gpu = " + ".join(f"{b / GIB:.1f}" for b in plan.per_device())
        verdict = "fits" if not plan.misfits() else "DOES NOT FIT"
        lines.append(
            f"{profile.name}: {plan.devices} GPU(s) [{per_gpu}] GiB on {profile.gpu.card_gib:g} "
            f"GiB cards: {verdict}"
        )
    return lines


def check_kv(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """vLLM's own KV-capacity check on each vLLM role that holds the model (kv_capacity.py)."""
    if profile.stack != "dynamo-vllm":
        return []
    from harness.audit.kv_capacity import kv_capacity_error

    out = []
    for role in plan_memory(profile).roles:
        call = cap.roles.get(role.role)
        if role.holds != "model" or call is None or call.module != "dynamo.vllm":
            continue
        with mock.patch.dict(os.environ, call.env):
            error = kv_capacity_error(call.engine_args, config_dir(profile.model.short_name))
        if error:
            out.append(
                Finding(launcher, role.role, f"vLLM's own start-up check refuses it: {error}",
                        "raise the role's KV bytes (gpu.max_num_seqs x max_model_len)")
            )  # fmt: skip
    return out
