"""Tiny random Gemma4ForConditionalGeneration, shaped like google/gemma-4-E2B-it from
transformers' own Gemma4Config (the real config.json is not reachable here): sliding-window
layers with a full-attention layer every 5th (a wider full-attention head, as the real
global_head_dim), per-layer input embeddings, the second half of the stack sharing the first
half's KV (num_kv_shared_layers), final-logit softcapping, and the vision tower with its 3x3
pooling; no audio tower (the serve cases send none). Image tokens attend causally, as E2B's
(its use_bidirectional_attention is unset; only the larger Gemma-4 models set "vision").

Its processor is transformers' Gemma4Processor around the CPU tier's byte-level BPE, with
Gemma-4's turn markers and media tokens; each image becomes <|image> + up to 280 soft tokens +
<image|> (max_soft_tokens 280, E2B's default_output_length)."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    Gemma4AudioFeatureExtractor,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4ImageProcessor,
    Gemma4Processor,
    Gemma4VideoProcessor,
    GenerationConfig,
)

from harness.tiny_models import fast_tokenizer, save_random_checkpoint

SPECIAL_TOKENS = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<|turn>",
    "<turn|>",
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|audio>",
    "<audio|>",
    "<|audio|>",
    "<|video|>",
]
TOKEN_ID = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
MEDIA_TOKENS = {
    "image_token": "<|image|>",
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "audio_token": "<|audio|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
}

# Gemma-4's turn format (<|turn>role ... <turn|>), the model's turn named "model"; each image
# part placed where it stands as the processor's image token, which it expands.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<|turn>' + role + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|image|>' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<turn|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|turn>model\\n' }}{%- endif %}"
)

# Five layers a block: four sliding, then one full (the real model's pattern); two blocks.
LAYER_TYPES = (["sliding_attention"] * 4 + ["full_attention"]) * 2
# CPU attention head sizes (vLLM 0.31 cpu_attn.py): 64 for sliding layers, 128 for full ones.
HEAD_DIM, GLOBAL_HEAD_DIM = 64, 128
MAX_SOFT_TOKENS = 280  # E2B's vision default_output_length; one of the processor's allowed sizes
# Gemma scales its embeddings by sqrt(hidden) and softcaps the logits at 30: at the Qwen
# families' 0.4 every answer is one token repeated (saturated logits); at 0.05 the 30-token
# answers vary (30 distinct tokens) and the green and red squares answer differently
# (measured 2026-12-05; 0.02 and 0.1 alike, 0.2 repeats).
INIT_STD = 0.05


def config(vocab_size: int) -> Gemma4Config:
    text = {
        "vocab_size": vocab_size,
        "vocab_size_per_layer_input": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": len(LAYER_TYPES),
        "layer_types": LAYER_TYPES,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "global_head_dim": GLOBAL_HEAD_DIM,
        "hidden_size_per_layer_input": 16,
        "num_kv_shared_layers": len(LAYER_TYPES) // 2,
        "use_double_wide_mlp": True,
        "sliding_window": 64,
        "final_logit_softcapping": 30.0,
        "max_position_embeddings": 4096,
        "use_bidirectional_attention": None,
        "initializer_range": INIT_STD,
        "pad_token_id": TOKEN_ID["<pad>"],
        "eos_token_id": TOKEN_ID["<turn|>"],
        "bos_token_id": TOKEN_ID["<bos>"],
    }
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "default_output_length": MAX_SOFT_TOKENS,  # vLLM reads it (gemma4_mm.py)
        "initializer_range": INIT_STD,
    }
    return Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        boi_token_id=TOKEN_ID["<|image>"],
        eoi_token_id=TOKEN_ID["<image|>"],
        image_token_id=TOKEN_ID["<|image|>"],
        boa_token_id=TOKEN_ID["<|audio>"],
        eoa_token_index=TOKEN_ID["<audio|>"],
        audio_token_id=TOKEN_ID["<|audio|>"],
        video_token_id=TOKEN_ID["<|video|>"],
        initializer_range=INIT_STD,
    )


def processor() -> Gemma4Processor:
    roles: dict[str, object] = {"bos_token": "<bos>", "eos_token": "<turn|>", "pad_token": "<pad>"}
    roles |= {"unk_token": "<unk>", "extra_special_tokens": MEDIA_TOKENS}
    tokenizer = fast_tokenizer(SPECIAL_TOKENS, roles, CHAT_TEMPLATE)
    return Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=Gemma4ImageProcessor(max_soft_tokens=MAX_SOFT_TOKENS),
        tokenizer=tokenizer,
        video_processor=Gemma4VideoProcessor(),
        chat_template=CHAT_TEMPLATE,
        image_seq_length=MAX_SOFT_TOKENS,
    )


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor()
    generation = GenerationConfig(
        bos_token_id=TOKEN_ID["<bos>"],
        eos_token_id=[TOKEN_ID["<turn|>"], TOKEN_ID["<eos>"]],
        pad_token_id=TOKEN_ID["<pad>"],
        do_sample=False,
    )
    cfg = config(vocab_size=len(proc.tokenizer))
    save_random_checkpoint(Gemma4ForConditionalGeneration, cfg, proc, generation, out_dir, seed)
