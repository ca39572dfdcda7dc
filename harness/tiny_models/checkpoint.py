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
