"""Tiny random Qwen2VLForConditionalGeneration, shaped like Qwen/Qwen2-VL-2B-Instruct: the
Qwen3-VL tokenizer and template (the same special tokens), Qwen2-VL's 14-pixel patches and its
M-RoPE sections laid out in blocks (Qwen3-VL interleaves them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import (
    GenerationConfig,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from harness.tiny_models import fast_tokenizer, save_random_checkpoint
from harness.tiny_models.qwen3_vl import CHAT_TEMPLATE, INIT_STD, SPECIAL_TOKENS, TOKEN_ID

PATCH, MERGE, TEMPORAL = 14, 2, 2
# The real repos' pixel bounds (preprocessor_config.json min_pixels 3136, max_pixels 12845056):
# 512x512 -> 504x504 -> 36x36 patches -> 324 image tokens. Every processor on the path counts the
# same there: transformers, vLLM, Dynamo's frontend (which reads min/max_pixels, below) and
# SGLang 0.5.21, which forces 3136..1003520 on any qwen2_vl checkpoint whatever its file says
# (srt/utils/hf_transformers/processor.py get_processor); smaller bounds would count 16 for
# transformers and 324 for SGLang.
IMAGE_SIZE = {"shortest_edge": 56 * 56, "longest_edge": 16384 * 28 * 28}
VIDEO_SIZE = {"shortest_edge": 28 * 28, "longest_edge": 4 * 84 * 112}
HEAD_DIM = 32


def text_config(vocab_size: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1_000_000.0,
            "mrope_section": [4, 6, 6],  # sums to head_dim / 2
        },
        "bos_token_id": TOKEN_ID["<|endoftext|>"],
        "eos_token_id": TOKEN_ID["<|im_end|>"],
        "initializer_range": INIT_STD,
        "tie_word_embeddings": True,
    }


def media_ids() -> dict[str, int]:
    """The media token ids the real config.json carries; `vision_token_id` (<|vision_pad|>) is
    one the transformers config class does not define but Dynamo's multimodal router reads to
    find the image placeholder (without it: "ModelProcessorSpec could not resolve
    placeholder_token_id", and the router routes blind)."""
    return {
        "vision_token_id": TOKEN_ID["<|vision_pad|>"],
        "image_token_id": TOKEN_ID["<|image_pad|>"],
        "video_token_id": TOKEN_ID["<|video_pad|>"],
        "vision_start_token_id": TOKEN_ID["<|vision_start|>"],
        "vision_end_token_id": TOKEN_ID["<|vision_end|>"],
    }


def config(vocab_size: int) -> Qwen2VLConfig:
    vision = {
        "depth": 2,
        "embed_dim": 64,
        "hidden_size": 128,  # the language model's width: the merger projects into it
        "mlp_ratio": 2,
        "num_heads": 2,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
        "initializer_range": INIT_STD,
        # the real config.json's name for the input channels (transformers 5 writes
        # `in_channels`); SGLang 0.5.21's Qwen2-VL vision tower reads only this one
        # (srt/models/qwen2_vl.py: "'Qwen2VLVisionConfig' object has no attribute 'in_chans'")
        "in_chans": 3,
    }
    return Qwen2VLConfig(
        text_config=text_config(vocab_size),
        vision_config=vision,
        tie_word_embeddings=True,
        **media_ids(),
    )


def processor(processor_class: Any = Qwen2VLProcessor) -> Any:
    tokenizer = fast_tokenizer(
        SPECIAL_TOKENS,
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        CHAT_TEMPLATE,
    )
    shared: dict[str, object] = {
        "patch_size": PATCH,
        "merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
    }
    shared |= {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    return processor_class(
        image_processor=Qwen2VLImageProcessor(size=IMAGE_SIZE, **shared),
        video_processor=Qwen2VLVideoProcessor(size=VIDEO_SIZE, **shared),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def generation() -> GenerationConfig:
    return GenerationConfig(
        bos_token_id=TOKEN_ID["<|endoftext|>"],
        eos_token_id=[TOKEN_ID["<|im_end|>"], TOKEN_ID["<|endoftext|>"]],
        pad_token_id=TOKEN_ID["<|endoftext|>"],
        do_sample=False,
    )


def write_pixel_bounds(out_dir: Path) -> None:
    """Add the `min_pixels` / `max_pixels` keys the real repos' preprocessor_config.json carry
    (Qwen/Qwen2-VL-2B-Instruct, Qwen/Qwen2.5-VL-3B-Instruct) beside the `size` transformers 5
    writes, with `size`'s values. Dynamo 1.6.1's frontend counts a Qwen2-VL image's tokens for KV
    routing from these two keys only, defaulting to 256*28*28 .. 1280*28*28 where they are
    missing (llm_multimodal's `Qwen2VLProcessor::from_preprocessor_config`): with bounds of
    784 .. 12544 and without the keys it counted 324 tokens for the 512x512 test image against
    the engine's 16, and no routed block ever matched a cached one (overlap 0/7; with the keys
    4/5; design-deviations.md at 7310361)."""
    path = out_dir / "preprocessor_config.json"
    data = json.loads(path.read_text())
    data["min_pixels"] = data["size"]["shortest_edge"]
    data["max_pixels"] = data["size"]["longest_edge"]
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor()
    cfg = config(vocab_size=len(proc.tokenizer))
    save_random_checkpoint(Qwen2VLForConditionalGeneration, cfg, proc, generation(), out_dir, seed)
    write_pixel_bounds(out_dir)
