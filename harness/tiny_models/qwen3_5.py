"""Tiny random Qwen3_5ForConditionalGeneration, shaped like Qwen/Qwen3.5-0.8B: the hybrid
language model (three Gated DeltaNet linear-attention layers, then one full-attention layer with
partial rotary and interleaved mrope, as the real one repeats) and Qwen3.5's vision tower, with
Qwen3-VL's tokenizer, template and processor (transformers' Qwen3_5 uses Qwen3VLProcessor).

Saved in bfloat16 (harness/core/precision.py FAMILY_DTYPE): vLLM 0.31's CPU Gated DeltaNet
kernels take nothing else ("CPU GDN attention requires BF16",
vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py; float16 refused the same way,
measured 2026-12-05)."""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

from harness.core.precision import family_dtype
from harness.tiny_models import save_random_checkpoint
from harness.tiny_models.qwen3_vl import (
    INIT_STD,
    TOKEN_ID,
    generation,
    media_ids,
    processor,
    vision_tower,
)

# The GDN CPU kernels take key/value head dims of 64 or 128 only (vLLM 0.31,
# chunk_gated_delta_rule_cpu); full attention's head dim is one CPU attention takes.
HEAD_DIM = 64
LINEAR, FULL = "linear_attention", "full_attention"
# Qwen3.5-0.8B's pattern (its config.json's layer_types): three linear layers, then a full one.
LAYER_TYPES = [LINEAR, LINEAR, LINEAR, FULL]
# The real model rotates a quarter of each head (partial_rotary_factor 0.25, mrope_section
# [11, 11, 10] of head dim 256); here 64 * 0.25 / 2 = 8 = 3 + 3 + 2.
ROTARY = {"partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2], "mrope_interleaved": True}


def config(vocab_size: int) -> Qwen3_5Config:
    text = {
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": len(LAYER_TYPES),
        "layer_types": LAYER_TYPES,
        # the real config.json carries it beside layer_types (SGLang 0.5.21 reads it:
        # configs/qwen3_next.py layers_block_type); transformers keeps it as given
        "full_attention_interval": len(LAYER_TYPES),
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": HEAD_DIM,
        "linear_value_head_dim": HEAD_DIM,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 2,
        # the router's 120 filler copies are 8,040 tokens (profiles/vllm/agg_router_qwen3.5-0.8b)
        "max_position_embeddings": 16384,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, **ROTARY},
        "partial_rotary_factor": ROTARY["partial_rotary_factor"],
        "bos_token_id": TOKEN_ID["<|endoftext|>"],
        "eos_token_id": TOKEN_ID["<|im_end|>"],
        "initializer_range": INIT_STD,
    }
    vision = vision_tower()
    # Untied: vLLM 0.31's Qwen3.5 reads tie_word_embeddings from the text config (False by
    # default there), so a checkpoint tied at the top level loads with an uninitialised lm_head
    # (every log-probability NaN, measured 2026-12-05); untied, the head is saved and loaded.
    return Qwen3_5Config(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **media_ids()
    )


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor()
    cfg = config(vocab_size=len(proc.tokenizer))
    model = Qwen3_5ForConditionalGeneration
    save_random_checkpoint(model, cfg, proc, generation(), out_dir, seed, family_dtype("qwen3_5"))
