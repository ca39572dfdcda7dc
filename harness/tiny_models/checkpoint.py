"""Save a randomly initialised model with its processor: the part every family shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig


def save_random_checkpoint(
    model_class: Any,
    config: Any,
    processor: Any,
    generation: GenerationConfig,
    out_dir: Path,
    seed: int,
) -> None:
    torch.manual_seed(seed)
    model = model_class(config).to(torch.bfloat16)
    model.generation_config = generation
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
