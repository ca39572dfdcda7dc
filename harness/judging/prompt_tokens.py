"""CPU-tier oracle: the `usage.prompt_tokens` vLLM should report, computed with the model's own
HF processor (chat template -> processor(text, images, videos) -> len(input_ids)).

Video: vLLM decodes and samples frames itself before its HF processor sees them. For
Qwen3-VL (`Qwen3VLVideoProcessor`) this module mirrors vLLM's `qwen3_vl` video loader (0.31,
the pinned engine; 0.32 samples alike)
(OpenCV decode; `n = int(total / fps * 2)`, clamped to [4, 768] and to `total`; indices
`linspace(0, total - 1, n).round()`) and hands the processor those frames with their metadata
(`do_sample_frames=False`), so the frame count and the per-frame timestamp text match exactly.
For any other video processor vLLM's generic loader samples with different rules (32 frames, no
fps metadata), which this module does not reproduce: `expected_prompt_tokens` returns None then.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:  # transformers takes ~5 s to import: loaded where a count is computed
    import numpy as np
    from transformers import ProcessorMixin
    from transformers.video_utils import VideoMetadata

MediaFetcher = Callable[[str], bytes]
# vLLM `Qwen3VLVideoBackend` defaults (vllm/multimodal/video.py, 0.31 and 0.32 alike).
QWEN3_VL_FPS, QWEN3_VL_MIN_FRAMES, QWEN3_VL_MAX_FRAMES, UNKNOWN_FPS = 2.0, 4, 768, 24.0


@lru_cache(maxsize=8)
def load_processor(model_dir: str) -> ProcessorMixin:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_dir)


def media_bytes(url: str, media: MediaFetcher | None) -> bytes:
    """Raw bytes behind a data: (base64), file:// or http(s) URL (the last via `media`)."""
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64"):
            raise ValueError(f"only base64 data URLs are supported, got {header!r}")
        return base64.b64decode(payload, validate=True)
    if url.startswith("file://"):
        return Path(unquote(urlparse(url).path)).read_bytes()
    if media is None:
        raise ValueError(f"no media fetcher given for {url!r}")
    return media(url)


def qwen3_vl_frame_indices(total: int, fps: float) -> list[int]:
    """vLLM 0.31's `Qwen3VLVideoBackend.compute_frames_index_to_sample` at its defaults.
    Example: 10 frames at 10 fps -> int(1 s * 2) = 2, raised to 4 -> [0, 3, 6, 9]."""
    import numpy as np

    num = int(total / fps * QWEN3_VL_FPS)
    num = min(max(num, QWEN3_VL_MIN_FRAMES), QWEN3_VL_MAX_FRAMES, total)
    return np.linspace(0, total - 1, num).round().astype(int).tolist()


def decode_video_like_vllm(data: bytes) -> tuple[np.ndarray, VideoMetadata]:
    """Decode and sample as vLLM 0.31's `Qwen3VLVideoBackend` with the OpenCV decoder does."""
    import cv2
    import cv2.videoio_registry as registry
    import numpy as np
    from transformers.video_utils import VideoMetadata

    api = next((b for b in registry.getStreamBufferedBackends() if registry.hasBackend(b)), None)
    stream = io.BytesIO(data)  # must outlive `cap`: release() reads through it
    cap = cv2.VideoCapture(stream, api, [])
    if not cap.isOpened():
        raise ValueError("could not open video stream")
    try:
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        # vLLM trusts an end-of-stream seek over the header when an mp4 edit list hides frames.
        if total > 0 and cap.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0):
            visible = int(cap.get(cv2.CAP_PROP_POS_FRAMES))
            at_end = not cap.grab()
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            if at_end and 0 < visible < total - 1:
                total = visible
        fps = cap.get(cv2.CAP_PROP_FPS) or UNKNOWN_FPS
        wanted = set(qwen3_vl_frame_indices(total, fps))
        frames, indices = [], []
        for idx in range(max(wanted) + 1):
            if not cap.grab():
                continue
            if idx in wanted:
                ok, frame = cap.retrieve()
                if ok:
                    frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
                    indices.append(idx)
    finally:
        cap.release()
    metadata = VideoMetadata(
        total_num_frames=total, fps=fps, duration=total / fps, frames_indices=indices
    )
    return np.stack(frames), metadata


def split_messages(
    messages: list[dict[str, Any]], keep_media: bool
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """OpenAI messages -> HF chat messages (`{"type": "image"}` parts, as vLLM renders them),
    plus the image and video URLs in order of appearance."""
    converted, images, videos = [], [], []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            converted.append({"role": message["role"], "content": content or ""})
            continue
        parts = []
        for part in content:
            kind = part["type"]
            if kind == "text":
                parts.append({"type": "text", "text": part["text"]})
            elif kind in ("image_url", "video_url") and keep_media:
                media_kind = kind.removesuffix("_url")
                (images if media_kind == "image" else videos).append(part[kind]["url"])
                parts.append({"type": media_kind})
            elif kind not in ("image_url", "video_url"):
                raise ValueError(f"unsupported content part type {kind!r}")
        converted.append({"role": message["role"], "content": parts})
    return converted, images, videos


def processor_inputs(
    model_dir: Path | str, messages: list[dict], media: MediaFetcher | None = None
) -> Any | None:
    """The model's own HF processor outputs for OpenAI chat `messages` (chat template, then the
    processor on text, images and videos decoded as vLLM decodes them), as torch tensors.
    None: the request has video and the model's video sampling is not mirrored (module doc)."""
    from PIL import Image

    processor = load_processor(str(Path(model_dir)))
    chat, image_urls, video_urls = split_messages(messages, keep_media=True)
    prompt = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    kwargs: dict[str, Any] = {}
    if image_urls:
        kwargs["images"] = [
            Image.open(io.BytesIO(media_bytes(url, media))).convert("RGB") for url in image_urls
        ]
    if video_urls:
        video_processor = getattr(processor, "video_processor", None)
        if video_processor is None:
            raise ValueError(f"{Path(model_dir).name} takes no video (vLLM answers 400)")
        if type(video_processor).__name__ != "Qwen3VLVideoProcessor":
            return None
        decoded = [decode_video_like_vllm(media_bytes(url, media)) for url in video_urls]
        kwargs["videos"] = [frames for frames, _ in decoded]
        kwargs["video_metadata"] = [metadata for _, metadata in decoded]
        kwargs["do_sample_frames"] = False
    return processor(text=[prompt], add_special_tokens=False, return_tensors="pt", **kwargs)


def expected_prompt_tokens(
    model_dir: Path, messages: list[dict], media: MediaFetcher | None = None
) -> int | None:
    """Prompt tokens for OpenAI chat `messages` with their images / videos, as vLLM counts them.

    `media(url)` returns the bytes behind an http(s) URL; data: and file:// URLs are read here.
    None: the request has video and the model's video sampling is not mirrored (module doc).
    Example: expected_prompt_tokens(qwen_dir, [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
        {"type": "text", "text": "Describe it."}]}]) -> 42
    """
    inputs = processor_inputs(model_dir, messages, media)
    return None if inputs is None else int(inputs["input_ids"].shape[1])


def text_only_prompt_tokens(model_dir: Path, messages: list[dict]) -> int:
    """Prompt tokens for the same `messages` with every image / video part removed."""
    processor = load_processor(str(Path(model_dir)))
    chat, _, _ = split_messages(messages, keep_media=False)
    prompt = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    return len(processor.tokenizer(prompt, add_special_tokens=False)["input_ids"])
