"""The CPU tier's independent reference: what the model itself makes of a request (transformers).

Nothing in it follows the code under test: a topology whose answers agree with each other but
not with the model itself (an encoder selecting the wrong features in every topology) disagrees
with it.

- `expected_prompt_tokens`: the `usage.prompt_tokens` vLLM should report, computed with the
  model's own HF processor (chat template -> processor(text, images, videos) -> len(input_ids)).
  Video: vLLM decodes and samples frames itself before its HF processor sees them. For Qwen3-VL
  (`Qwen3VLVideoProcessor`) `decode_video_like_vllm` mirrors vLLM's `qwen3_vl` video loader
  (0.31, the pinned engine; 0.32 samples alike) (OpenCV decode; `n = int(total / fps * 2)`,
  clamped to [4, 768] and to `total`; indices `linspace(0, total - 1, n).round()`) and hands the
  processor those frames with their metadata (`do_sample_frames=False`), so the frame count and
  the per-frame timestamp text match exactly. For any other video processor vLLM's generic
  loader samples with different rules (32 frames, no fps metadata), which is not reproduced
  here: `expected_prompt_tokens` (and everything built on `processor_inputs`) returns None then.
  SGLang (0.5.21) samples and resizes Qwen-VL video itself before its HF processor:
  `decode_video_like_sglang` mirrors it (every frame decoded, `smart_nframes` at 2 fps, indices
  `linspace` truncated, `smart_resize` to multiples of 28 within its video pixel bounds, a
  bilinear torchvision resize), picked by the profile's stack (`VIDEO_LIKE`).
- `reference`: the model's own answer: Hugging Face transformers `generate` on the same tiny
  checkpoint, on the raw media, greedy, with the model's own chat template, processor, feature
  layer and feature selection (`processor_inputs`). Every request is compared with it whatever
  path its media travels (agg, the encode worker, the prefill worker's own video decoding).
  vLLM's answers equal it character for character on both tiny models in float32
  (docs/measurements.md, "Figures behind constants in the code"), so the rule is exact equality
  of the text. A path that computes something else shows as a declared upstream defect
  (profiles' `known_defect`, docs/explanation/upstream-defects.md).
- `BaselineStore`: outputs recorded per launch in this session, for cross-topology equality
  checks.
- `role_prompt_check`, `describe_divergence`: why an answer is not the model's own: where the
  input each role ran departs from the model's. Three facts, each read from something the code
  under test does not compute:
  - the media tokens: `usage.prompt_tokens` minus the text the model's processor counts,
    against the processor's own media-token count (LLaVA-1.5 through Dynamo 1.6.1's encode
    worker: 65 against 64, the CLS row kept);
  - each engine role's prompt, from its own `vllm:prompt_tokens_total`
    (harness/topology/roles.py): an E/P/D decode worker that runs a prompt of another length
    than the prefill whose KV it imported (prefill 115, decode 114) names the role whose input
    diverged;
  - the first answer token that differs from the model's own greedy answer."""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

from harness.oracles.checks import OracleResult, Step

if TYPE_CHECKING:
    import numpy as np
    import torch
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


def split_messages(
    messages: list[dict[str, Any]], keep_media: bool
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """OpenAI messages -> HF chat messages (`{"type": "image"}` parts, as vLLM renders them),
    plus the image and video URLs in order of appearance."""
    converted: list[dict[str, Any]] = []
    images: list[str] = []
    videos: list[str] = []
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
    model_dir: Path | str,
    messages: list[dict[str, Any]],
    media: MediaFetcher | None = None,
    stack: str = VLLM,
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
        decoded = [VIDEO_LIKE[stack](media_bytes(url, media)) for url in video_urls]
        kwargs["videos"] = [frames for frames, _ in decoded]
        kwargs["video_metadata"] = [metadata for _, metadata in decoded]
        kwargs["do_sample_frames"] = False
    return processor(text=[prompt], add_special_tokens=False, return_tensors="pt", **kwargs)


def expected_prompt_tokens(
    model_dir: Path,
    messages: list[dict[str, Any]],
    media: MediaFetcher | None = None,
    stack: str = VLLM,
) -> int | None:
    """Prompt tokens for OpenAI chat `messages` with their images / videos, as vLLM counts them.

    `media(url)` returns the bytes behind an http(s) URL; data: and file:// URLs are read here.
    None: the request has video and the model's video sampling is not mirrored (module doc).
    Example: expected_prompt_tokens(qwen_dir, [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
        {"type": "text", "text": "Describe it."}]}]) -> 42
    """
    inputs = processor_inputs(model_dir, messages, media, stack)
    return None if inputs is None else int(inputs["input_ids"].shape[1])


# How many alternatives each generated token's log-probability comes with, on both sides: as
# vLLM's own model tests compare an engine with transformers (check_logprobs_close, 5 there too).
TOP_LOGPROBS = 5


@dataclass(frozen=True)
class Reference:
    """The model's own greedy answer: its token ids and, per token, the raw (unprocessed)
    log-probabilities, as vLLM returns them (its default logprobs mode, raw_logprobs)."""

    ids: list[int]
    steps: list[Step]


@lru_cache(maxsize=4)
def load_model(model_dir: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return model.eval()


def reference_answer(
    model_dir: Path | str, body: dict[str, Any], media: MediaFetcher, dtype: str
) -> str | None:
    """The greedy answer to an OpenAI chat `body` (its messages and max_tokens), as text.
    None where processor_inputs cannot mirror vLLM's preprocessing."""
    ids = reference_token_ids(model_dir, body, media, dtype)
    if ids is None:
        return None
    return str(load_processor(str(model_dir)).tokenizer.decode(ids, skip_special_tokens=True))


def reference_token_ids(
    model_dir: Path | str, body: dict[str, Any], media: MediaFetcher, dtype: str
) -> list[int] | None:
    """The model's own greedy answer as token ids (see reference_answer)."""
    found = reference(model_dir, body, media, dtype)
    return None if found is None else found.ids


def reference(
    model_dir: Path | str,
    body: dict[str, Any],
    media: MediaFetcher,
    dtype: str,
    stack: str = VLLM,
) -> Reference | None:
    """One greedy `generate` on the raw media: the answer's ids and each token's top
    TOP_LOGPROBS log-probabilities. None where processor_inputs cannot mirror the engine's."""
    import torch

    inputs = processor_inputs(model_dir, body["messages"], media, stack)
    if inputs is None:
        return None
    model = load_model(str(model_dir), dtype)
    inputs = {
        k: v.to(getattr(torch, dtype)) if torch.is_floating_point(v) else v
        for k, v in inputs.items()
    }
    with torch.inference_mode():
        out = model.generate(
            **inputs,
            max_new_tokens=body["max_tokens"],
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    return Reference(ids, steps_of(ids, list(out.logits), str(model_dir)))


def steps_of(tokens: list[int], logits: list[torch.Tensor], model_dir: str) -> list[Step]:
    """Each generated token with its raw log-probability and top-k, as vLLM returns them."""
    import torch

    tokenizer = load_processor(model_dir).tokenizer

    def text(token: int) -> str:  # as vLLM renders a logprob's token: special ones as ''
        return str(tokenizer.decode([token], skip_special_tokens=True))

    steps = []
    for token, row in zip(tokens, logits, strict=True):
        logprobs = torch.log_softmax(row.float().reshape(-1), dim=-1)
        top = torch.topk(logprobs, TOP_LOGPROBS)
        steps.append(
            Step(
                text(token),
                float(logprobs[token]),
                {text(int(t)): float(v) for v, t in zip(top.values, top.indices, strict=True)},
            )
        )
    return steps


Key = tuple[str, str, str, str]  # (stack, model, topology, request fingerprint)


@dataclass
class BaselineStore:
    """The first answer per key, the launch signature that gave it, and whether the request's
    image went through an encode worker there."""

    answers: dict[Key, tuple[str, str, bool]] = field(default_factory=dict)
    # the case that gives a key's answer failed: "<id> failed (<cause>)"
    failures: dict[Key, str] = field(default_factory=dict)

    def record(self, key: Key, signature: str, content: str, encoded: bool = False) -> None:
        self.answers.setdefault(key, (signature, content, encoded))

    def record_failure(self, key: Key, test_id: str, cause: str) -> None:
        self.failures.setdefault(key, f"{test_id} failed ({cause})")

    def failure(self, key: Key) -> str | None:
        """The case whose answer to `key` others compare with failed: what it was and why (an
        answer it recorded before failing is no baseline to hold another topology to)."""
        return self.failures.get(key)

    def ran(self, key: Key, other_than: str) -> bool:
        """A launch of `key`'s stack, model and topology other than `other_than` answered in
        this session (a launch's own answers are no baseline for it)."""
        answered = self.answers.items()
        return any(k[:3] == key[:3] and sig != other_than for k, (sig, _, _) in answered)

    def get(self, key: Key, other_than: str) -> str | None:
        """The recorded answer, unless it came from `other_than` (a check against itself)."""
        found = self.answers.get(key)
        if found is None or found[0] == other_than:
            return None
        return found[1]

    def unencoded(self, key: Key, other_than: str) -> str | None:
        """The answer to the same request (the same stack, model and fingerprint as `key`) on
        a topology whose path has no encode worker, other than `other_than`."""
        stack, model, _, fingerprint = key
        for (s, m, _, f), (signature, content, encoded) in self.answers.items():
            same_request = (s, m, f) == (stack, model, fingerprint)
            if same_request and not encoded and signature != other_than:
                return content
        return None


@dataclass(frozen=True)
class ProcessorCounts:
    """The model processor's own counts for one request."""

    prompt: int  # every prompt token
    media: int  # image and video placeholder tokens among them
    images: int = 0  # of those, the image placeholders

    def media_implied(self, prompt_tokens: int) -> int:
        """Media tokens a reported prompt length implies, the text being the processor's."""
        return prompt_tokens - (self.prompt - self.media)


def processor_counts(
    model_dir: Path | str, messages: list[dict[str, Any]], media: MediaFetcher, stack: str = VLLM
) -> ProcessorCounts | None:
    """None where the processor cannot mirror the engine's preprocessing (processor_inputs)."""
    inputs = processor_inputs(model_dir, messages, media, stack)
    if inputs is None:
        return None
    processor = load_processor(str(model_dir))
    ids = inputs["input_ids"][0].tolist()
    image, video = getattr(processor, "image_token", None), getattr(processor, "video_token", None)
    placeholders = {processor.tokenizer.convert_tokens_to_ids(t) for t in (image, video) if t}
    image_id = processor.tokenizer.convert_tokens_to_ids(image) if image else None
    return ProcessorCounts(
        len(ids), sum(1 for i in ids if i in placeholders), sum(1 for i in ids if i == image_id)
    )


def role_prompt_check(
    ran: Mapping[str, int], counts: ProcessorCounts, through_encoder: bool = False
) -> OracleResult:
    """Every engine role ran the prompt the model's processor builds: prefill and decode (or the
    encoder's embeddings and the processor) agree on the request's media tokens. Example:
    "prefill and decode disagree on the request's media tokens: prefill ran 65 (115 prompt
    tokens), decode 64 (114); the model's processor places 64 (114): the input of prefill
    diverged"."""
    if not ran:
        return OracleResult(True, "no engine role reported its prompt")
    each = ", ".join(
        f"{role} {counts.media_implied(n)} ({n} prompt tokens)" for role, n in ran.items()
    )
    off = sorted(role for role, n in ran.items() if n != counts.prompt)
    if not off:
        return OracleResult(True, f"every role ran the model's prompt ({each})")
    if len(set(ran.values())) > 1:
        lead = f"{' and '.join(ran)} disagree on the request's media tokens"
    elif through_encoder:
        lead = "the encoder's embeddings and the model's processor disagree on the media tokens"
    else:
        lead = "the roles' prompt differs from the model's"
    return OracleResult(
        False,
        f"{lead}: {each}; the model's processor places {counts.media} ({counts.prompt}): the "
        f"input of {', '.join(off)} diverged",
    )


def first_token_difference(
    tokenizer: Any, answer: str, reference_ids: list[int]
) -> tuple[int, str, str] | None:
    """(index, the answer's token, the model's token) at the first answer token that differs from
    the model's own, the answer re-tokenized; None when the tokens agree."""
    got = tokenizer(answer, add_special_tokens=False)["input_ids"]
    want = [i for i in reference_ids if i not in tokenizer.all_special_ids]
    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return index, tokenizer.decode([a]), tokenizer.decode([b])
    if len(got) == len(want):
        return None
    index = min(len(got), len(want))
    return index, _token_at(tokenizer, got, index), _token_at(tokenizer, want, index)


def _token_at(tokenizer: Any, ids: list[int], index: int) -> str:
    return tokenizer.decode(ids[index : index + 1]) or "<end>"


def describe_divergence(
    model_dir: Path | str,
    answer: str,
    reference_ids: list[int],
    prompt_tokens: int | None,
    counts: ProcessorCounts | None,
    ran: Mapping[str, int],
) -> str:
    """One line: the first differing token, the media tokens the usage implies against the
    processor's, each engine role's prompt. Example: "differs from the model's own answer; first
    differing token #0: 'der' where the model says 'red'; media tokens disagree: usage implies
    65, the processor counts 64; prompt tokens ran: prefill 115, decode 114 (processor 114)"."""
    tokenizer = load_processor(str(model_dir)).tokenizer
    parts = ["differs from the model's own answer"]
    diff = first_token_difference(tokenizer, answer, reference_ids)
    if diff is not None:
        parts.append(
            f"first differing token #{diff[0]}: {diff[1]!r} where the model says {diff[2]!r}"
        )
    if counts is not None and prompt_tokens is not None and counts.media:
        implied = counts.media_implied(prompt_tokens)
        verdict = "agree" if implied == counts.media else "disagree"
        parts.append(
            f"media tokens {verdict}: usage implies {implied}, the processor counts {counts.media}"
        )
    if ran and counts is not None:
        shown = ", ".join(f"{role} {n}" for role, n in ran.items())
        parts.append(f"prompt tokens ran: {shown} (processor {counts.prompt})")
    return "; ".join(parts)
