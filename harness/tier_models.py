"""Which model a profile runs on a tier: the tiny local build (CPU) or the cached HF model (GPU)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.profile import Profile, Tier
from harness.verdict import Cause, TopologyFailure


def model_for(profile: Profile, tier: Tier) -> str:
    if tier == "cpu":
        from harness.tiny_models import build_tiny_model

        assert profile.model.cpu is not None
        return str(build_tiny_model(profile.model.cpu))
    return ensure_cached(profile.model.gpu)


def ensure_cached(repo_id: str) -> str:
    """GPU tier runs offline: the model must already be in the Hugging Face cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot_download(repo_id, local_files_only=True)
    except (LocalEntryNotFoundError, OSError) as exc:
        cache = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
        raise TopologyFailure(
            Cause.MODEL_NOT_CACHED,
            f"{repo_id} is not in the Hugging Face cache ({cache}); run: "
            f"huggingface-cli download {repo_id}",
        ) from exc
    return repo_id
