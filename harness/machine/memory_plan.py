"""GPU memory of every role of a profile, in bytes, from the model's architecture facts.

The facts of the GPU tier's models ship as data (no weights) under model_facts/: one directory
per model short name with the model's Hugging Face `config.json` (for vLLM's own start-up
checks) and `facts.json` (the numbers the memory plan uses; tests recompute them from the
config).

A role's bytes = weights + KV cache + activation peak + vision-encoder peak + runtime overhead.
What a role holds comes from its profile entry (`gpu.holds`):

- `model`: an engine (vLLM or SGLang) with the whole multimodal model: all weights, a KV cache of
  `max_num_seqs x max_model_len` tokens (plus vLLM's one null block), the language model's
  profile-run peak, and the vision tower's profile-run peak.
- `vision_tower`: Dynamo's Qwen-VL encode worker, an in-process vLLM with `mm_encoder_only`
  (dynamo/vllm/multimodal_utils/model.py `load_vision_model`): vision weights, Dynamo's 64 MiB
  KV cache, the vision tower's peak.
- `hf_model`: Dynamo's encode worker for other families (LLaVA), `AutoModel.from_pretrained(
  torch_dtype=float16)`: every weight, no KV cache, one image through the tower.

Example (Qwen3-VL-2B, 4096 tokens x 2 sequences, agg): weights 3.96 GiB + KV 0.88 GiB + language
peak 0.24 GiB + vision peak 2.50 GiB + runtime 0.75 GiB = 8.33 GiB.

`launcher_memory_env` turns the plan into the variables launchers/lib/common.sh reads, for the
cards a lease gave each position."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Protocol

from harness.core.role_contract import (
    GPU_UTIL_ENV,
    KV_BYTES_ENV,
    KV_TOKENS_ENV,
    MAX_MODEL_LEN_ENV,
    MAX_NUM_BATCHED_TOKENS_ENV,
    MAX_NUM_SEQS_ENV,
    MEM_FRACTION_ENV,
    role_key,
)
from harness.profiles import GpuTierSpec, ModelSpec, RoleSpec

FACTS_DIR = Path(__file__).parent / "model_facts"


@dataclass(frozen=True)
class ModelFacts:
    """E.g. Qwen3-VL-2B: 28 layers x 8 KV heads x 128 head dim, bf16 -> 112 KiB of KV per token."""

    repo_id: str
    dtype: str
    dtype_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    native_context: int
    params_language_model: int
    params_vision_tower: int
    vision_hidden_size: int
    vision_intermediate_size: int
    vision_patches_per_token: int  # vision-tower positions behind one language-model token
    max_image_tokens: int  # the largest image the processor emits, in language-model tokens
    # checkpoints these facts bound from above, and why (e.g. an FP8 release of the same model)
    upper_bound_for: dict[str, str] = field(default_factory=dict)

    def plans(self, repo_id: str) -> str:
        """'' when these are `repo_id`'s own facts, the bound's reason when they bound it."""
        if repo_id == self.repo_id:
            return ""
        if repo_id in self.upper_bound_for:
            return self.upper_bound_for[repo_id]
        raise KeyError(
            f"model.gpu {repo_id!r}: the facts in {FACTS_DIR} are {self.repo_id!r}'s and bound "
            f"{sorted(self.upper_bound_for) or 'no other checkpoint'}"
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token: layers x KV heads x head dim x 2 x dtype."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def params(self) -> int:
        return self.params_language_model + self.params_vision_tower


def config_dir(short_name: str) -> Path:
    """The directory holding the model's config.json, e.g. .../model_facts/qwen3-vl-2b."""
    path = FACTS_DIR / short_name
    if not (path / "config.json").is_file():
        known = sorted(p.name for p in FACTS_DIR.iterdir() if (p / "facts.json").is_file())
        raise KeyError(f"no model facts for {short_name!r} in {FACTS_DIR}; known: {known}")
    return path


@cache
def model_facts(short_name: str) -> ModelFacts:
    raw = json.loads((config_dir(short_name) / "facts.json").read_text())
    names = {f.name for f in fields(ModelFacts)}
    return ModelFacts(**{k: v for k, v in raw.items() if k in names})


GIB = 2**30
MIB = 2**20

# Per process, outside the tensors counted below: the CUDA context (~0.5 GiB per process on
# Hopper with CUDA 12 lazy loading, as nvidia-smi shows it) plus what vLLM's profiler calls
# non-torch memory, 0.03-0.2 GiB on one GPU (vllm#13882, vllm PR #14447).
RUNTIME_BYTES = 768 * MIB
# Dynamo 1.6.1's Qwen-VL encode worker: DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES default
# (dynamo/vllm/multimodal_utils/model.py, "enough KV for vLLM's init lifecycle").
ENCODER_KV_BYTES = 64 * MIB
# vLLM reserves one null block of the KV cache (check_enough_kv_cache_memory); 16 tokens is
# vLLM's default block size on CUDA.
KV_NULL_BLOCK_TOKENS = 16
# Transient buffers per token in a forward pass: the MLP's gate, up and activated outputs
# (3 x intermediate) and about six hidden-size tensors (residual, norms, q/k/v, attention out).
# Checked against vLLM's own profile of Llama-3-8B (vllm PR #10511: activation peak 1.26 GiB at
# 8192 tokens and 256 sequences; this model gives 1.28 GiB, tests/harness/test_memory_plan.py).
MLP_BUFFERS_PER_TOKEN = 3
HIDDEN_BUFFERS_PER_TOKEN = 6
# The sampler's profile run holds fp32 logits and their softmax: 2 x 4 bytes per vocab entry
# for each of max_num_seqs dummy sequences (vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run).
SAMPLER_BYTES_PER_VOCAB_ENTRY = 8


@dataclass(frozen=True)
class EngineLimits:
    """What bounds a role's KV cache and activations (vLLM `--max-model-len`, `--max-num-seqs`,
    `--max-num-batched-tokens`; SGLang `--context-length`, `--max-running-requests`)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass(frozen=True)
class RoleMemory:
    role: str
    device: int  # position in the GPUs the topology leases
    holds: str
    weights: int
    kv_cache: int
    activations: int
    encoder: int
    runtime: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.encoder + self.runtime

    def describe(self) -> str:
        """E.g. 'prefill 8.33 GiB (weights 3.96 + KV 0.88 + act 0.24 + vision 2.50 + rt 0.75)'."""
        parts = (self.weights, self.kv_cache, self.activations, self.encoder, self.runtime)
        w, kv, act, enc, rt = (f"{b / GIB:.2f}" for b in parts)
        return (
            f"{self.role} {self.total / GIB:.2f} GiB (weights {w} + KV {kv} + act {act} + "
            f"vision {enc} + rt {rt})"
        )


def language_peak(facts: ModelFacts, limits: EngineLimits) -> int:
    per_token = (
        MLP_BUFFERS_PER_TOKEN * facts.intermediate_size
        + HIDDEN_BUFFERS_PER_TOKEN * facts.hidden_size
    ) * facts.dtype_bytes
    sampler = limits.max_num_seqs * facts.vocab_size * SAMPLER_BYTES_PER_VOCAB_ENTRY
    return limits.max_num_batched_tokens * per_token + sampler


def vision_peak(facts: ModelFacts, tokens: int) -> int:
    """The vision tower on `tokens` language-model tokens' worth of patches, plus the encoder
    outputs those tokens leave in the encoder cache."""
    per_patch = (
        MLP_BUFFERS_PER_TOKEN * facts.vision_intermediate_size
        + HIDDEN_BUFFERS_PER_TOKEN * facts.vision_hidden_size
    ) * facts.dtype_bytes
    outputs = tokens * facts.hidden_size * facts.dtype_bytes
    return tokens * facts.vision_patches_per_token * per_patch + outputs


def kv_cache_bytes(facts: ModelFacts, limits: EngineLimits) -> int:
    tokens = limits.max_num_seqs * limits.max_model_len + KV_NULL_BLOCK_TOKENS
    return tokens * facts.kv_bytes_per_token


def encoder_budget_tokens(facts: ModelFacts, limits: EngineLimits) -> int:
    """vLLM profiles the tower with max(max_num_batched_tokens, the largest item's tokens)
    (vllm/v1/core/encoder_cache_manager.py compute_mm_encoder_budget)."""
    return max(limits.max_num_batched_tokens, facts.max_image_tokens)


def role_memory(
    role: str,
    device: int,
    holds: str,
    facts: ModelFacts,
    limits: EngineLimits,
    kv_bytes: int | None = None,
) -> RoleMemory:
    """`kv_bytes` overrides the KV cache the limits imply (e.g. to model upstream's byte caps)."""
    weight_bytes = facts.params * facts.dtype_bytes
    if holds == "model":
        return RoleMemory(
            role,
            device,
            holds,
            weights=weight_bytes,
            kv_cache=kv_cache_bytes(facts, limits) if kv_bytes is None else kv_bytes,
            activations=language_peak(facts, limits),
            encoder=vision_peak(facts, encoder_budget_tokens(facts, limits)),
            runtime=RUNTIME_BYTES,
        )
    if holds == "vision_tower":
        return RoleMemory(
            role,
            device,
            holds,
            weights=facts.params_vision_tower * facts.dtype_bytes,
            kv_cache=ENCODER_KV_BYTES if kv_bytes is None else kv_bytes,
            activations=0,
            encoder=vision_peak(facts, encoder_budget_tokens(facts, limits)),
            runtime=RUNTIME_BYTES,
        )
    if holds == "hf_model":
        return RoleMemory(
            role,
            device,
            holds,
            weights=weight_bytes,
            kv_cache=0,
            activations=0,
            encoder=vision_peak(facts, facts.max_image_tokens),
            runtime=RUNTIME_BYTES,
        )
    raise ValueError(f"role {role}: unknown gpu.holds {holds!r}")


@dataclass(frozen=True)
class MemoryPlan:
    """Every GPU role of one profile and where it sits. `per_device()` is what a lease asks for."""

    profile: str
    card_bytes: int  # the smallest card the profile claims to fit
    limits: EngineLimits
    roles: tuple[RoleMemory, ...]

    def per_device(self) -> list[int]:
        """Bytes per leased GPU position, e.g. [20.5 GiB] for single-GPU E/P/D."""
        need: dict[int, int] = defaultdict(int)
        for role in self.roles:
            need[role.device] += role.total
        return [need.get(i, 0) for i in range(max(need) + 1)] if need else []

    @property
    def devices(self) -> int:
        return len(self.per_device())

    def misfits(self, card_bytes: int | None = None) -> list[str]:
        """One line per GPU position whose roles do not fit the card (default: the claimed one)."""
        card = self.card_bytes if card_bytes is None else card_bytes
        out = []
        for device, need in enumerate(self.per_device()):
            if need > card:
                on = [r for r in self.roles if r.device == device]
                out.append(
                    f"GPU #{device}: {' + '.join(r.role for r in on)} need "
                    f"{need / GIB:.2f} GiB > {card / GIB:.2f} GiB card ("
                    + "; ".join(r.describe() for r in on)
                    + ")"
                )
        return out


class Deployable(Protocol):
    """What a memory plan reads: a profile, or one launch of it (launch/launch_spec.py)."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> ModelSpec: ...

    @property
    def gpu(self) -> GpuTierSpec: ...

    @property
    def worker_roles(self) -> Sequence[RoleSpec]: ...


def plan_memory(profile: Deployable) -> MemoryPlan:
    """The memory plan of a profile's GPU tier."""
    spec = profile.gpu
    facts = model_facts(profile.model.short_name)
    facts.plans(profile.model.gpu)
    limits = EngineLimits(
        max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens or spec.max_model_len,
    )
    roles = tuple(
        role_memory(r.name, r.gpu.device, r.gpu.holds, facts, limits) for r in profile.worker_roles
    )
    return MemoryPlan(profile.name, int(spec.card_gib * GIB), limits, roles)


# vLLM's start-up precheck wants `free >= gpu_memory_utilization x total` even when the KV cache
# is given in bytes (vllm/v1/worker/utils.py request_memory); upstream Dynamo passes 0.01.
MIN_GPU_UTILIZATION = 0.01
MAX_GPU_UTILIZATION = 0.99  # a role larger than its card is the audit's finding, not vLLM's


def precheck_utilization(role_bytes: int, card_bytes: int) -> float:
    """The role's share of its card, rounded down to 0.01: vLLM then checks at start that at
    least that much is free, which the lease guarantees, and sizes nothing by it."""
    share = int(role_bytes * 100 / card_bytes) / 100
    return min(MAX_GPU_UTILIZATION, max(MIN_GPU_UTILIZATION, share))


def static_fraction(on_card: int, free_at_grant: int, card_bytes: int) -> float:
    """SGLang's `--mem-fraction-static` for a role on a shared card: SGLang sizes its KV pool as
    free-after-weights minus `total x (1 - fraction)`, so `total x (1 - fraction)` is set to the
    bytes no role of this topology may touch (free at grant minus everything leased here),
    rounded up to 0.01."""
    untouchable = max(0, free_at_grant - on_card)
    return min(0.99, math.ceil((card_bytes - untouchable) * 100 / card_bytes) / 100)


def launcher_memory_env(
    plan: MemoryPlan, device_totals: list[int], device_frees: list[int]
) -> dict[str, str]:
    """The variables launchers/lib/common.sh reads (`vllm_memory_args ROLE`, `sglang_memory_args
    ROLE`), for the cards the lease gave each position: HARNESS_MAX_MODEL_LEN and friends, and
    per role HARNESS_KV_BYTES_<ROLE>, HARNESS_GPU_UTIL_<ROLE>, HARNESS_KV_TOKENS_<ROLE>,
    HARNESS_MEM_FRACTION_<ROLE>."""
    limits = plan.limits
    env = {
        MAX_MODEL_LEN_ENV: str(limits.max_model_len),
        MAX_NUM_SEQS_ENV: str(limits.max_num_seqs),
        MAX_NUM_BATCHED_TOKENS_ENV: str(limits.max_num_batched_tokens),
    }
    per_device = plan.per_device()
    for role in plan.roles:
        key = role_key(role.role)
        card = device_totals[role.device]
        env[KV_BYTES_ENV.format(role=key)] = str(role.kv_cache)
        env[GPU_UTIL_ENV.format(role=key)] = f"{precheck_utilization(role.total, card):.2f}"
        env[KV_TOKENS_ENV.format(role=key)] = str(
            limits.max_num_seqs * limits.max_model_len + KV_NULL_BLOCK_TOKENS
        )
        fraction = static_fraction(per_device[role.device], device_frees[role.device], card)
        env[MEM_FRACTION_ENV.format(role=key)] = f"{fraction:.2f}"
    return env
