"""What the model's own processor makes of a request, read from nothing the code under test
computes: its inputs (`processor_inputs`: the chat template, then the processor on the text and the
media as the engine decodes them, media_mirror.py), the prompt tokens the engine should report
(`expected_prompt_tokens`, `processor_counts`), and whether every engine role ran that prompt
(`role_prompt_check`: each role's own `vllm:prompt_tokens_total` against the processor's count; an
E/P/D decode worker that runs another length than the prefill whose KV it imported names the role
whose input diverged)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.oracles.checks import OracleResult
from harness.oracles.media_mirror import VIDEO_LIKE, VLLM, MediaFetcher, media_bytes

if TYPE_CHECKING:
    from transformers import ProcessorMixin


@lru_cache(maxsize=8)
def load_processor(model_dir: str) -> ProcessorMixin:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_dir)


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
