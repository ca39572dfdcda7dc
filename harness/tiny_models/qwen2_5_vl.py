"""Tiny random Qwen2_5_VLForConditionalGeneration, shaped like Qwen/Qwen2.5-VL-3B-Instruct:
Qwen2-VL's tokenizer, template, processor and language model, and Qwen2.5-VL's vision tower
(windowed attention, full attention in the listed blocks, SwiGLU MLP, RMSNorm)."""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

from harness.tiny_models import save_random_checkpoint
from harness.tiny_models.qwen2_vl import (
    MERGE,
    PATCH,
    TEMPORAL,
    generation,
    media_ids,
    processor,
    write_pixel_bounds,
)
from harness.tiny_models.qwen2_vl import text_config as qwen2_vl_text
from harness.tiny_models.qwen3_vl import INIT_STD


def config(vocab_size: int) -> Qwen2_5_VLConfig:
    vision = {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "out_hidden_size": 128,  # the language model's width
        "num_heads": 2,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
        "window_size": 56,  # 4 patches a side: the 8x8-patch image spans several windows
        "fullatt_block_indexes": [1],
        "initializer_range": INIT_STD,
    }
    return Qwen2_5_VLConfig(
        text_config=qwen2_vl_text(vocab_size),
        vision_config=vision,
        tie_word_embeddings=True,
        **media_ids(),
    )


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor(Qwen2_5_VLProcessor)
    cfg = config(vocab_size=len(proc.tokenizer))
    model = Qwen2_5_VLForConditionalGeneration
    save_random_checkpoint(model, cfg, proc, generation(), out_dir, seed)
    write_pixel_bounds(out_dir)
