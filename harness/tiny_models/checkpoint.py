"""Save a randomly initialised model with its processor: the part every family shares.

Saved in float32, the dtype every model computation of the CPU tier runs in: the engines
(`--dtype float32`, launchers/lib/common.sh), the HF reference, and the roles that take their
dtype from the checkpoint: Dynamo's Qwen-VL encode worker builds its in-process vLLM with no
dtype (dynamo/vllm/multimodal_utils/model.py `load_vision_model`), so a bfloat16 checkpoint ran
its vision tower in bf16 beside float32 engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig

CHECKPOINT_DTYPE = torch.float32
# The files the real repos ship per sub-processor (Qwen/Qwen3-VL-2B-Instruct and
# llava-hf/llava-1.5-7b-hf hold preprocessor_config.json, Qwen also video_preprocessor_config.json);
# transformers 5 nests them all in processor_config.json instead. Dynamo 1.6.1's frontend reads
# preprocessor_config.json for MM-aware KV routing: without it the KV router logged "mm-routing:
# failed to read preprocessor_config.json", routed images blind (router_kv_hit_rate 0) and
# repeated images missed the prefix cache.
SUB_PROCESSORS = ("image_processor", "video_processor")


def save_random_checkpoint(
    model_class: Any,
    config: Any,
    processor: Any,
    generation: GenerationConfig,
    out_dir: Path,
    seed: int,
) -> None:
    torch.manual_seed(seed)
    model = model_class(config).to(CHECKPOINT_DTYPE)
    model.generation_config = generation
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    for part in SUB_PROCESSORS:
        sub = getattr(processor, part, None)
        if sub is not None:
            sub.save_pretrained(out_dir)
