"""Dynamo 1.6.1's embedding-cache connector on the CPU, unpatched versus patched: upstream's uuid
pass-through sequence (mm_agg_gemma4-e2b-it_uuid_passthrough's payload) on the tiny Qwen3-VL,
with an encoder budget of one image so that the last request can only be served from Dynamo's
CPU store (tests/harness/embedding_cache_side.py). Unpatched, the load puts the cached rows on
"cuda" (`_get_device` knows only CUDA and XPU) and the engine fails; patched
(docs/patches/dynamo-1.6.1-embedding-cache-device.patch), the answer is the model's own on the
image the uuid names (transformers, float32). Both sides run the same vLLM; side B has the
patched package first on its path, as `validate patch` puts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_patch import patched_checkout
from harness.oracles.model_reference import reference
from harness.payloads.media import build_media
from harness.tiny_models import build_tiny_model

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

SIDE = Path(__file__).with_name("embedding_cache_side.py")
PATCH = REPO_ROOT / "docs" / "patches" / "dynamo-1.6.1-embedding-cache-device.patch"
SAME_IMAGE = "What colors are prominent in the same image? Respond only with the colors."


def side(model: Path, image: Path, src: Path | None, out: Path) -> dict:
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "DEBUG"}  # the connector logs its hits at DEBUG
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(SIDE), str(model), str(image), str(out)],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads(out.read_text())
    result["log"] = done.stdout + done.stderr
    return result


def test_the_connector_serves_a_cached_embedding_on_cpu_only_patched(tmp_path: Path) -> None:
    model = build_tiny_model("qwen3_vl")
    image = build_media(tmp_path / "media").green_square_png
    unpatched = side(model, image, None, tmp_path / "unpatched.json")
    print(f"\nunpatched: {unpatched.get('error') or unpatched.get('ids')}")
    assert "error" in unpatched, unpatched["ids"]
    assert "CUDA" in unpatched["error"], unpatched["error"]  # the rows sent to "cuda"
    src = patched_checkout(PATCH, tmp_path / "patched") / "components" / "src"
    patched = side(model, image, src, tmp_path / "patched.json")
    assert "error" not in patched, patched["error"]
    assert (
        "Dynamo multimodal embedding cache hit: identifier='dynamo-mm-cache-image-1'"
        in (patched["log"])
    )  # upstream's check of this id
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": SAME_IMAGE},
            {"type": "image_url", "image_url": {"url": f"http://x/{image.name}"}},
        ],
    }
    body = {"messages": [message], "max_tokens": 100}
    own = reference(model, body, lambda _url: image.read_bytes(), "float32")
    assert own is not None and patched["ids"] == own.ids
    print(f"patched: the model's own answer, {len(own.ids)} tokens, from Dynamo's CPU store")
