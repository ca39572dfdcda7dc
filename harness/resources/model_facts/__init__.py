"""Architecture facts of the GPU tier's models, shipped as data (no weights): one directory per
model short name with the model's Hugging Face `config.json` (for vLLM's own start-up checks) and
`facts.json` (the numbers the memory plan uses; tests recompute them from the config)."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

FACTS_DIR = Path(__file__).parent


@dataclass(frozen=True)
class ModelFacts:
    """E.g. Qwen3-VL-2B: 28 layers x 8 KV heads x 128 head dim, bf16 -> 112 KiB of KV per token."""

    repo_id: str
    dtype: str
    dtype_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    native_context: int
    params_language_model: int
    params_vision_tower: int
    vision_hidden_size: int
    vision_intermediate_size: int
    vision_patches_per_token: int  # vision-tower positions behind one language-model token
    max_image_tokens: int  # the largest image the processor emits, in language-model tokens

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token: layers x KV heads x head dim x 2 x dtype."""
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def params(self) -> int:
        return self.params_language_model + self.params_vision_tower


def config_dir(short_name: str) -> Path:
    """The directory holding the model's config.json, e.g. .../model_facts/qwen3-vl-2b."""
    path = FACTS_DIR / short_name
    if not (path / "config.json").is_file():
        known = sorted(p.name for p in FACTS_DIR.iterdir() if (p / "facts.json").is_file())
        raise KeyError(f"no model facts for {short_name!r} in {FACTS_DIR}; known: {known}")
    return path


@cache
def model_facts(short_name: str) -> ModelFacts:
    raw = json.loads((config_dir(short_name) / "facts.json").read_text())
    names = {f.name for f in fields(ModelFacts)}
    return ModelFacts(**{k: v for k, v in raw.items() if k in names})
