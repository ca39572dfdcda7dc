"""Tiny random LlavaForConditionalGeneration, shaped like llava-hf/llava-1.5-7b-hf."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, save_file
from transformers import (
    CLIPImageProcessor,
    GenerationConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
)

from harness.tiny_models import fast_tokenizer, save_random_checkpoint

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<image>", "<pad>"]
TOKEN_ID = {token: i for i, token in enumerate(SPECIAL_TOKENS)}

# llava-hf/llava-1.5-7b-hf's template (images first, then text), minus the generation tags.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' %}{{- message['role'].upper() + ': ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] + ' ' }}"
    "{%- else %}"
    "{%- for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{- '<image>\\n' }}{%- endfor %}"
    "{%- for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{- content['text'] + ' ' }}{%- endfor %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'ASSISTANT:' }}{%- endif %}"
)

IMAGE_SIZE, PATCH = 112, 14  # (112 / 14)^2 = 64 image tokens (CLS dropped: "default")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def config(vocab_size: int) -> LlavaConfig:
    text = {
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "bos_token_id": TOKEN_ID["<s>"],
        "eos_token_id": TOKEN_ID["</s>"],
        "pad_token_id": TOKEN_ID["<pad>"],
        "tie_word_embeddings": False,
    }
    vision = {
        "model_type": "clip_vision_model",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH,
        "projection_dim": 128,
        "hidden_act": "quick_gelu",
    }
    return LlavaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=TOKEN_ID["<image>"],
        image_seq_length=(IMAGE_SIZE // PATCH) ** 2,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        pad_token_id=TOKEN_ID["<pad>"],
        tie_word_embeddings=False,
    )


def processor() -> LlavaProcessor:
    tokenizer = fast_tokenizer(
        SPECIAL_TOKENS,
        {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"},
        CHAT_TEMPLATE,
    )
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def to_llava_hf_layout(weights_file: Path) -> None:
    """transformers 5 saves the CLIP tower flat (`vision_tower.embeddings.*`); vLLM 0.32 and the
    llava-hf checkpoints use `vision_tower.vision_model.*`."""
    tensors = load_file(weights_file)
    prefix = "vision_tower."
    renamed = {
        (prefix + "vision_model." + key.removeprefix(prefix) if key.startswith(prefix) else key): t
        for key, t in tensors.items()
    }
    save_file(dict(sorted(renamed.items())), weights_file, metadata={"format": "pt"})


def build(out_dir: Path, seed: int) -> None:
    """Write config, weights, tokenizer, processor and chat template into `out_dir`."""
    proc = processor()
    generation = GenerationConfig(
        bos_token_id=TOKEN_ID["<s>"],
        eos_token_id=TOKEN_ID["</s>"],
        pad_token_id=TOKEN_ID["<pad>"],
        do_sample=False,
    )
    cfg = config(vocab_size=len(proc.tokenizer))
    save_random_checkpoint(LlavaForConditionalGeneration, cfg, proc, generation, out_dir, seed)
    to_llava_hf_layout(out_dir / "model.safetensors")
