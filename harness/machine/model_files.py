"""Which model a launch runs on a tier: the tiny local build (CPU) or the cached Hugging Face
model (GPU), downloaded once under a file lock where allowed."""

from __future__ import annotations

import os
from pathlib import Path

import filelock

from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import ModelSpec, Tier

DOWNLOAD_ENV = "HARNESS_DOWNLOAD_MODELS"


def model_for(model: ModelSpec, tier: Tier) -> str:
    if tier == "cpu":
        from harness.tiny_models import build_tiny_model

        assert model.cpu is not None
        return str(build_tiny_model(model.cpu))
    return ensure_cached(model.gpu)


def ensure_cached(repo_id: str) -> str:
    """GPU tier runs offline: the model must already be in the Hugging Face cache, unless
    HARNESS_DOWNLOAD_MODELS=1 lets the first case download it (once, under a file lock, so
    xdist workers wait for one download instead of racing)."""
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo_id, local_files_only=True)
        return repo_id
    except Exception as exc:  # LocalEntryNotFoundError, OSError: not (fully) cached
        missing = exc
    if os.environ.get(DOWNLOAD_ENV) != "1":
        raise TopologyFailure(
            Cause.MODEL_NOT_CACHED,
            f"{repo_id} is not in the Hugging Face cache ({hf_home()}); run: "
            f"huggingface-cli download {repo_id} (or set {DOWNLOAD_ENV}=1)",
        ) from missing
    return download_once(repo_id)


def download_once(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    locks = Path(hf_home()) / "serve-harness-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(locks / f"{repo_id.replace('/', '--')}.lock")):
        try:
            snapshot_download(repo_id, local_files_only=True)  # another worker just finished
            return repo_id
        except Exception:
            pass
        try:
            snapshot_download(repo_id)
        except Exception as exc:  # offline, unreachable hub, gated model, disk full, ...
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise TopologyFailure(
                Cause.MODEL_NOT_CACHED,
                f"{repo_id} is not in the Hugging Face cache ({hf_home()}) and downloading it "
                f"failed ({reason}); run: huggingface-cli download {repo_id}",
            ) from exc
    return repo_id


def hf_home() -> str:
    return os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
