"""Build a tiny random checkpoint once per (family, builder source, library versions), cached."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import filelock
import tokenizers
import torch
import transformers

from harness.core.paths import cache_dir
from harness.tiny_models import corpus_digest, llava, qwen3_vl

SEED = 0
BUILDERS: dict[str, Callable[[Path, int], None]] = {
    "qwen3_vl": qwen3_vl.build,
    "llava": llava.build,
}


def default_cache_dir() -> Path:
    """`models/` under the harness cache (`harness.core.paths.cache_dir`)."""
    return cache_dir() / "models"


def build_key(family: str) -> str:
    """Changes whenever anything that shapes the checkpoint's bytes changes."""
    digest = hashlib.sha256(family.encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    versions = (transformers.__version__, tokenizers.__version__, torch.__version__, SEED)
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
