"""Tiny random Qwen3VLForConditionalGeneration, shaped like Qwen/Qwen3-VL-2B-Instruct."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    GenerationConfig,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from harness.tiny_models import fast_tokenizer, save_random_checkpoint

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
TOKEN_ID = {token: i for i, token in enumerate(SPECIAL_TOKENS)}

# Qwen3-VL's template without tools / reasoning: media parts expand in place, in order.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content['type'] == 'video' or 'video' in content %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

PATCH, MERGE, TEMPORAL = 16, 2, 2
# 512x512 -> 128x128 -> 8x8 patches -> 16 image tokens.
IMAGE_SIZE = {"shortest_edge": 32 * 32, "longest_edge": 128 * 128}
# Video limits count all frames together (t * h * w).
VIDEO_SIZE = {"shortest_edge": 32 * 32, "longest_edge": 4 * 96 * 128}
HEAD_DIM = 32
# Far above the usual 0.02: tiny random weights must give input-dependent, varied tokens, or
# every answer is the same repeated token and output-equality checks could not fail.
INIT_STD = 0.4


def vision_tower() -> dict[str, object]:
    """The tiny vision tower Qwen3-VL and Qwen3.5 share (Qwen3-VL adds its deepstack taps)."""
    return {
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,  # the language model's width
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": TEMPORAL,
        "num_position_embeddings": 64,
        "initializer_range": INIT_STD,
    }


def config(vocab_size: int) -> Qwen3VLConfig:
    text = {
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5_000_000.0,
            "mrope_section": [8, 4, 4],  # sums to head_dim / 2
            "mrope_interleaved": True,
        },
        "bos_token_id": TOKEN_ID["<|endoftext|>"],
        "eos_token_id": TOKEN_ID["<|im_end|>"],
        "initializer_range": INIT_STD,
    }
    vision = {**vision_tower(), "deepstack_visual_indexes": [1]}
    return Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=True,
        **media_ids(),
    )


def processor() -> Qwen3VLProcessor:
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
    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=IMAGE_SIZE, **shared),
        video_processor=Qwen3VLVideoProcessor(
            size=VIDEO_SIZE,
            fps=2,
            min_frames=4,
            max_frames=768,
            cap_pixels_per_frame=False,  # transformers' unset default; unset, it warns every run
            **shared,
        ),
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


def media_ids() -> dict[str, int]:
    """The config's image, video and vision-bracket token ids."""
    return {
        "image_token_id": TOKEN_ID["<|image_pad|>"],
        "video_token_id": TOKEN_ID["<|video_pad|>"],
        "vision_start_token_id": TOKEN_ID["<|vision_start|>"],
        "vision_end_token_id": TOKEN_ID["<|vision_end|>"],
    }


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor()
    cfg = config(vocab_size=len(proc.tokenizer))
    save_random_checkpoint(Qwen3VLForConditionalGeneration, cfg, proc, generation(), out_dir, seed)
