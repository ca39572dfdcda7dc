"""The media an engine reads, as its serving path decodes and samples them before the model's
processor sees them, mirrored here so the model's own inputs are the engine's.

- `media_bytes`: the raw bytes behind a data: (base64), file:// or http(s) URL.
- vLLM 0.31's Qwen3-VL video loader (`decode_video_like_vllm`; 0.32 samples alike): OpenCV decode,
  `n = int(total / fps * 2)` frames clamped to [4, 768] and to `total`, indices `linspace(0, total -
  1, n).round()`, handed to the processor with their metadata (`do_sample_frames=False`), so the
  frame count and the per-frame timestamp text match exactly. For any other video processor vLLM's
  generic loader samples with other rules (32 frames, no fps metadata), which is not mirrored.
- SGLang 0.5.21 samples and resizes Qwen-VL video itself before its HF processor
  (`decode_video_like_sglang`): every frame decoded, `smart_nframes` at 2 fps, indices `linspace`
  truncated, `smart_resize` to multiples of 28 within its video pixel bounds, a bilinear torchvision
  resize; picked by the profile's stack (`VIDEO_LIKE`)."""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    import numpy as np
    from transformers.video_utils import VideoMetadata


MediaFetcher = Callable[[str], bytes]

# vLLM `Qwen3VLVideoBackend` defaults (vllm/multimodal/video.py, 0.31 and 0.32 alike).
QWEN3_VL_FPS, QWEN3_VL_MIN_FRAMES, QWEN3_VL_MAX_FRAMES, UNKNOWN_FPS = 2.0, 4, 768, 24.0


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
    return [int(i) for i in np.linspace(0, total - 1, num).round()]


@contextlib.contextmanager
def opened_video(data: bytes) -> Iterator[Any]:
    """OpenCV's capture of in-memory video bytes (its stream-buffered backend), released after."""
    import cv2
    import cv2.videoio_registry as registry

    api = next((b for b in registry.getStreamBufferedBackends() if registry.hasBackend(b)), None)
    if api is None:
        raise ValueError("this OpenCV has no stream-buffered video backend")
    stream = io.BytesIO(data)  # must outlive `cap`: release() reads through it
    # OpenCV takes any object with read and seek; its stubs name only its own IStreamReader
    cap = cv2.VideoCapture(cast("cv2.IStreamReader", stream), api, [])
    if not cap.isOpened():
        raise ValueError("could not open video stream")
    try:
        yield cap
    finally:
        cap.release()


def decode_video_like_vllm(data: bytes) -> tuple[np.ndarray, VideoMetadata]:
    """Decode and sample as vLLM 0.31's `Qwen3VLVideoBackend` with the OpenCV decoder does."""
    import cv2
    import numpy as np
    from transformers.video_utils import VideoMetadata

    with opened_video(data) as cap:
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
    metadata = VideoMetadata(
        total_num_frames=total, fps=fps, duration=total / fps, frames_indices=indices
    )
    return np.stack(frames), metadata


# SGLang 0.5.21's Qwen-VL video preprocessing defaults (sglang/srt/multimodal/processors/qwen_vl.py:
# FPS, FPS_MIN_FRAMES, FPS_MAX_FRAMES, FRAME_FACTOR, IMAGE_FACTOR, VIDEO_MIN_PIXELS,
# VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS with VIDEO_MAX_PIXELS unset in the environment).
SGLANG_FPS, SGLANG_MIN_FRAMES, SGLANG_MAX_FRAMES, SGLANG_FRAME_FACTOR = 2.0, 4, 768, 2

SGLANG_IMAGE_FACTOR = 28

SGLANG_VIDEO_MIN_PIXELS, SGLANG_VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28

SGLANG_VIDEO_TOTAL_PIXELS = int(128000 * 28 * 28 * 0.9)


def sglang_frame_indices(total: int, fps: float) -> list[int]:
    """SGLang 0.5.21's `smart_nframes` + `preprocess_video` sampling at its defaults: n = total
    / fps * 2 clamped to [4, min(768, total)] (each bound and n on a multiple of 2), indices
    `linspace(0, total - 1, n)` truncated. Example: 10 frames at 5 fps -> 4 -> [0, 3, 6, 9]."""
    import math

    import numpy as np

    factor = SGLANG_FRAME_FACTOR
    low = math.ceil(SGLANG_MIN_FRAMES / factor) * factor
    high = math.floor(min(SGLANG_MAX_FRAMES, total) / factor) * factor
    num = min(min(max(total / fps * SGLANG_FPS, low), high), total)
    num = math.floor(num / factor) * factor
    return [int(i) for i in np.unique(np.linspace(0, total - 1, num=num, dtype=np.int64))]


def sglang_resized(height: int, width: int, frames: int) -> tuple[int, int]:
    """SGLang 0.5.21's `smart_resize` as `preprocess_video` calls it (factor 28, its video pixel
    bounds)."""
    import math

    factor = SGLANG_IMAGE_FACTOR
    low = SGLANG_VIDEO_MIN_PIXELS
    high = max(
        min(SGLANG_VIDEO_MAX_PIXELS, SGLANG_VIDEO_TOTAL_PIXELS / frames * SGLANG_FRAME_FACTOR),
        int(low * 1.05),
    )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > high:
        beta = math.sqrt((height * width) / high)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < low:
        beta = math.sqrt(low / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode_video_like_sglang(data: bytes) -> tuple[Any, VideoMetadata]:
    """Decode (OpenCV, every frame) and sample, then resize (torchvision, bilinear) as SGLang
    0.5.21's Qwen-VL processor does before the HF processor sees the frames (TCHW uint8)."""
    import cv2
    import numpy as np
    import torch
    from torchvision.transforms.functional import InterpolationMode, resize
    from transformers.video_utils import VideoMetadata

    with opened_video(data) as cap:
        fps = cap.get(cv2.CAP_PROP_FPS) or UNKNOWN_FPS
        decoded = []
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            decoded.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    total = len(decoded)
    indices = sglang_frame_indices(total, fps)
    video = torch.from_numpy(np.stack([decoded[i] for i in indices])).permute(0, 3, 1, 2)
    height, width = sglang_resized(video.shape[2], video.shape[3], video.shape[0])
    video = resize(video, [height, width], interpolation=InterpolationMode.BILINEAR)
    metadata = VideoMetadata(
        total_num_frames=total,
        fps=fps,
        duration=total / fps,
        frames_indices=np.asarray(indices),
        video_backend="torchvision",
    )
    return video, metadata


# How each stack's engine decodes and samples a Qwen3-VL video before the model's processor.
VIDEO_LIKE: dict[str, Callable[[bytes], tuple[Any, VideoMetadata]]] = {
    "dynamo-vllm": decode_video_like_vllm,
    "dynamo-sglang": decode_video_like_sglang,
}

VLLM = "dynamo-vllm"
