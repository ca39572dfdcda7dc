"""The GPU memory plan: facts recomputed from the shipped configs, the model checked against
vLLM's own profile and upstream Dynamo's measured peaks, the launcher variables it yields."""

from __future__ import annotations

import json

import pytest

from harness.core.paths import REPO_ROOT
from harness.core.role_contract import role_key
from harness.machine.memory_plan import (
    GIB,
    EngineLimits,
    ModelFacts,
    config_dir,
    language_peak,
    launcher_memory_env,
    model_facts,
    plan_memory,
    precheck_utilization,
    role_memory,
    static_fraction,
)
from harness.profiles import load_profiles

PROFILES = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}


@pytest.mark.parametrize("short_name", ["qwen3-vl-2b", "llava-1.5-7b"])
def test_facts_match_the_shipped_config_and_its_parameter_count(short_name: str) -> None:
    """Shapes from config.json; parameters by instantiating it on torch's meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    facts = model_facts(short_name)
    config = AutoConfig.from_pretrained(config_dir(short_name))
    text = config.get_text_config()
    assert (facts.layers, facts.kv_heads, facts.head_dim) == (
        text.num_hidden_layers,
        text.num_key_value_heads,
        getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
    )
    assert (facts.hidden_size, facts.intermediate_size, facts.vocab_size) == (
        text.hidden_size,
        text.intermediate_size,
        text.vocab_size,
    )
    assert facts.native_context == text.max_position_embeddings
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    vision = sum(
        p.numel()
        for name, p in model.named_parameters()
        if name.startswith(("model.visual", "model.vision_tower", "model.multi_modal_projector"))
    )
    total = sum(p.numel() for p in model.parameters())
    assert (facts.params_vision_tower, facts.params) == (vision, total)


def test_kv_bytes_per_token_are_the_known_figures() -> None:
    assert model_facts("qwen3-vl-2b").kv_bytes_per_token == 112 * 1024  # 28 x 8 x 128 x 2 x 2
    assert model_facts("llava-1.5-7b").kv_bytes_per_token == 512 * 1024  # 32 x 32 x 128 x 2 x 2
    native = model_facts("qwen3-vl-2b")
    assert native.native_context * native.kv_bytes_per_token / GIB == 28.0  # the 28 GiB


def test_language_peak_agrees_with_vllms_own_profile_of_llama_3_8b() -> None:
    """vLLM PR #10511 logs a 1.26 GiB activation peak for Llama-3-8B (8192 tokens, 256 seqs)."""
    llama = ModelFacts(
        repo_id="meta-llama/Meta-Llama-3-8B",
        dtype="bfloat16",
        dtype_bytes=2,
        layers=32,
        kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=14336,
        vocab_size=128256,
        native_context=8192,
        params_language_model=8_030_261_248,
        params_vision_tower=0,
        vision_hidden_size=0,
        vision_intermediate_size=0,
        vision_patches_per_token=0,
        max_image_tokens=0,
    )
    peak = language_peak(llama, EngineLimits(8192, 256, 8192)) / GIB
    assert peak == pytest.approx(1.26, rel=0.05)


# Upstream Dynamo's recorded single-GPU peaks for Qwen3-VL-2B (tests/serve multimodal profiles,
# shared/notes/upstream-gpu.md) with the KV caps those tests passed, on a card below 70 GiB
# (vLLM's defaults there: 2048 batched tokens, 256 sequences; vllm/engine/arg_utils.py).
UPSTREAM = [
    ("E/PD", 15.0, {"encode": ("vision_tower", None), "pd": ("model", 4_096_361_000)}),
    (
        "E/P/D",
        18.7,
        {
            "encode": ("vision_tower", None),
            "prefill": ("model", 536_870_912),
            "decode": ("model", 536_870_912),
        },
    ),
    (
        "E/P/D video",
        19.7,
        {
            "encode": ("vision_tower", None),
            "prefill": ("model", 536_870_912),
            "decode": ("model", 536_870_912),
        },
    ),
]


def test_the_model_is_within_a_quarter_of_upstreams_measured_peaks() -> None:
    facts = model_facts("qwen3-vl-2b")
    limits = EngineLimits(max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=2048)
    rows = []
    for name, measured, roles in UPSTREAM:
        total = sum(
            role_memory(role, 0, holds, facts, limits, kv_bytes=kv).total
            for role, (holds, kv) in roles.items()
        )
        rows.append((name, measured, total / GIB))
    print("\n".join(f"{n}: model {m:.2f} GiB vs measured {u:.1f} GiB" for n, u, m in rows))
    for name, measured, modelled in rows:
        assert abs(modelled - measured) / measured <= 0.25, (name, modelled, measured)


def test_every_shipped_gpu_profile_fits_the_card_it_claims() -> None:
    for profile in PROFILES.values():
        if profile.gpu_skip:  # its GPU tier names why it is not planned
            continue
        plan = plan_memory(profile)
        assert plan.misfits() == [], profile.name
        assert plan.devices <= profile.gpu.gpus


def test_a_checkpoint_the_facts_do_not_bound_is_refused_naming_model_gpu() -> None:
    fp8 = PROFILES["agg_qwen3-vl-2b"]
    assert fp8.model.gpu == "Qwen/Qwen3-VL-2B-Instruct-FP8"
    assert "upper bound" in model_facts("qwen3-vl-2b").plans(fp8.model.gpu)
    assert model_facts("qwen3-vl-2b").plans("Qwen/Qwen3-VL-2B-Instruct") == ""
    other = fp8.model_copy(
        update={"model": fp8.model.model_copy(update={"gpu": "Qwen/Qwen3-VL-4B-Instruct"})}
    )
    with pytest.raises(KeyError, match=r"model\.gpu 'Qwen/Qwen3-VL-4B-Instruct'"):
        plan_memory(other)


def test_qwen_agg_at_native_context_does_not_fit_a_24_gib_card() -> None:
    """The issue's case: without a max model length the KV cache alone is 28 GiB a sequence."""
    agg = PROFILES["agg_qwen3-vl-2b"]
    native = agg.model_copy(
        update={"gpu": agg.gpu.model_copy(update={"max_model_len": 262144, "max_num_seqs": 1})}
    )
    (misfit,) = plan_memory(native).misfits()
    assert misfit.startswith("GPU #0: worker need ") and "> 24.00 GiB card" in misfit
    assert "KV 28.00" in misfit


def test_llava_layouts_keep_weights_and_kv_inside_each_card() -> None:
    for name in ("e_pd_llava-1.5-7b", "epd_llava-1.5-7b"):
        plan = plan_memory(PROFILES[name])
        weights = 13.0 * GIB  # LLaVA-1.5-7B fp16: 7.06e9 parameters x 2 bytes = 13.16 GiB
        assert all(r.weights > weights for r in plan.roles)
        assert max(plan.per_device()) <= 24 * GIB
    assert plan_memory(PROFILES["epd_llava-1.5-7b"]).devices == 3


def test_launcher_variables_for_a_single_gpu_epd_on_a_24564_mib_card() -> None:
    plan = plan_memory(PROFILES["epd_qwen3-vl-2b"])
    card = 24564 * 2**20  # an RTX 4090's "24 GB"
    env = launcher_memory_env(plan, [card], [card - 400 * 2**20])
    prefill = next(r for r in plan.roles if r.role == "prefill")
    assert env["HARNESS_KV_BYTES_PREFILL"] == str(prefill.kv_cache)
    assert int(env["HARNESS_KV_BYTES_PREFILL"]) == (2 * 4096 + 16) * 112 * 1024
    assert env["HARNESS_KV_BYTES_ENCODE"] == str(64 * 2**20)
    assert env["HARNESS_MAX_MODEL_LEN"] == "4096" and env["HARNESS_MAX_NUM_SEQS"] == "2"
    assert float(env["HARNESS_GPU_UTIL_PREFILL"]) * card <= prefill.total  # clears the precheck
    assert float(env["HARNESS_GPU_UTIL_PREFILL"]) == 0.33


def test_precheck_utilization_and_static_fraction_examples() -> None:
    assert precheck_utilization(8 * GIB, 80 * GIB) == 0.1
    assert precheck_utilization(1, 80 * GIB) == 0.01
    assert precheck_utilization(90 * GIB, 80 * GIB) == 0.99
    # 20 GiB of ours on an 80 GiB card, 70 GiB free at grant: 50 GiB must stay untouched
    assert static_fraction(20 * GIB, 70 * GIB, 80 * GIB) == 0.38


def test_list_json_and_facts_files_are_plain_data() -> None:
    for short in ("qwen3-vl-2b", "llava-1.5-7b"):
        raw = json.loads((config_dir(short) / "facts.json").read_text())
        assert "_source" in raw and raw["repo_id"] == model_facts(short).repo_id


def test_the_role_adapter_reads_the_variables_the_plan_writes() -> None:
    """One contract (harness/core/role_contract.py), two sides: machine/ writes the planned
    variables, the role adapter's flag tables (a stdlib-only script inside each role) read them."""
    from harness.launch.role_flags import SGLANG_PLANNED, VLLM_ENCODER_PLANNED, VLLM_PLANNED

    plan = plan_memory(PROFILES["epd_qwen3-vl-2b"])
    card = 24564 * 2**20
    written = launcher_memory_env(plan, [card], [card - 400 * 2**20])
    for role in (r.role for r in plan.roles):
        key = role_key(role)
        for table in (VLLM_PLANNED, VLLM_ENCODER_PLANNED, SGLANG_PLANNED):
            for flag, template in table.items():
                assert template.format(role=key) in written, (flag, template)
