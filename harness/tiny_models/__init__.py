"""What every tiny random checkpoint of the CPU tier shares: its tokenizer and how it is saved.

The families (qwen3_vl.py, llava.py) shape the models; `build_tiny_model` builds one once per
(family, builder source, library versions) and caches it.

- `train_byte_level_bpe`, `fast_tokenizer`: a tiny byte-level BPE tokenizer trained on a fixed
  list of the stdlib's own source files.
- `save_random_checkpoint`: a randomly initialised model saved with its processor, in its
  family's precision (harness/core/precision.py FAMILY_DTYPE). The checkpoint's dtype is the
  one every model computation of its family runs in on the CPU tier: the engines (the role
  adapter gives each CPU role `--dtype` of the family), the HF reference, and the roles that take
  their dtype from the checkpoint (Dynamo's Qwen-VL encode worker builds its in-process vLLM
  with no dtype, dynamo/vllm/multimodal_utils/model.py `load_vision_model`)."""

from __future__ import annotations

import hashlib
import importlib
import shutil
import sysconfig
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import filelock
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast

from harness.core.paths import cache_dir
from harness.core.precision import DEFAULT_DTYPE, family_dtype

VOCAB_SIZE = 1024

# Fixed and ordered: the same files in the same order give the same merges, hence the same bytes.
CORPUS_FILES = (
    "textwrap.py",
    "string.py",
    "json/decoder.py",
    "json/encoder.py",
    "shlex.py",
    "calendar.py",
)


def corpus_paths() -> list[Path]:
    """The training files, resolved in the running interpreter's stdlib."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [stdlib / name for name in CORPUS_FILES]


def corpus_digest() -> str:
    """sha256 over the corpus bytes: part of the cache key (the stdlib differs between Pythons)."""
    digest = hashlib.sha256()
    for path in corpus_paths():
        digest.update(path.read_bytes())
    return digest.hexdigest()


def train_byte_level_bpe(special_tokens: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE; `special_tokens` get ids 0..n-1 in the order given."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [path.read_text(encoding="utf-8") for path in corpus_paths()]
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tokenizer


def fast_tokenizer(
    special_tokens: list[str], roles: Mapping[str, object], chat_template: str
) -> PreTrainedTokenizerFast:
    """Wrap a freshly trained BPE for transformers; `roles` maps e.g. eos_token -> token."""
    return PreTrainedTokenizerFast(
        tokenizer_object=train_byte_level_bpe(special_tokens),
        chat_template=chat_template,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
        **roles,
    )


# The files the real repos ship per sub-processor (Qwen/Qwen3-VL-2B-Instruct and
# llava-hf/llava-1.5-7b-hf hold preprocessor_config.json, Qwen also video_preprocessor_config.json);
# transformers 5 nests them all in processor_config.json instead. Dynamo 1.6.1's frontend reads
# preprocessor_config.json for MM-aware KV routing: without it the KV router logs "mm-routing:
# failed to read preprocessor_config.json", routes images blind (router_kv_hit_rate 0) and
# repeated images miss the prefix cache (design-deviations.md at 7310361, "KV router and cache
# hits").
SUB_PROCESSORS = ("image_processor", "video_processor")


def save_random_checkpoint(
    model_class: Any,
    config: Any,
    processor: Any,
    generation: GenerationConfig,
    out_dir: Path,
    seed: int,
    dtype: str = DEFAULT_DTYPE,
) -> None:
    torch.manual_seed(seed)
    model = model_class(config).to(getattr(torch, dtype))
    model.generation_config = generation
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    for part in SUB_PROCESSORS:
        sub = getattr(processor, part, None)
        if sub is not None:
            sub.save_pretrained(out_dir)


SEED = 0


def _family_builder(family: str) -> Callable[[Path, int], None]:
    """The `build(out_dir, seed)` of the family's own module, imported when first used (the
    family modules import this package's helpers)."""

    def build(out_dir: Path, seed: int) -> None:
        importlib.import_module(f"{__name__}.{family}").build(out_dir, seed)

    return build


BUILDERS: dict[str, Callable[[Path, int], None]] = {
    family: _family_builder(family)
    for family in ("qwen3_vl", "llava", "qwen2_vl", "qwen2_5_vl", "qwen3_5", "gemma4")
}


def default_cache_dir() -> Path:
    """`models/` under the harness cache (`harness.core.paths.cache_dir`)."""
    return cache_dir() / "models"


def build_key(family: str) -> str:
    """Changes whenever anything that shapes the checkpoint's bytes changes."""
    digest = hashlib.sha256(family.encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    versions = (
        transformers.__version__,
        tokenizers.__version__,
        torch.__version__,
        SEED,
        family_dtype(family),
    )
    digest.update(repr(versions).encode())
    digest.update(corpus_digest().encode())
    return digest.hexdigest()[:16]


def build_tiny_model(family: str, cache_dir: Path | None = None) -> Path:
    """Return the directory of the tiny `family` checkpoint, building it on first use.

    Safe under parallel pytest workers: one builds under a file lock, into a temporary directory
    that is renamed into place, so a model directory that exists is complete.
    Example: build_tiny_model("qwen3_vl") -> ~/.cache/serve-harness/models/qwen3_vl-1a2b3c4d5e6f7a8b
    """
    if family not in BUILDERS:
        raise ValueError(f"unknown tiny model family {family!r}; known: {sorted(BUILDERS)}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    model_dir = cache / f"{family}-{build_key(family)}"
    if model_dir.is_dir():
        return model_dir
    with filelock.FileLock(str(cache / f"{model_dir.name}.lock")):
        if model_dir.is_dir():
            return model_dir
        tmp = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.", dir=cache))
        try:
            BUILDERS[family](tmp, SEED)
            for path in tmp.iterdir():
                path.chmod(0o644)
            tmp.chmod(0o755)
            tmp.rename(model_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return model_dir
