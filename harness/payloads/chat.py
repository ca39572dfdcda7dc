"""OpenAI chat request bodies for a case's requests, with media from the asset server."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.payloads.media import AssetServer, MediaSet, data_url
from harness.profiles import MediaKind, RequestSpec

PART_TYPE = {
    "image_url": "image_url",
    "image_b64": "image_url",
    "video_url": "video_url",
    "video_b64": "video_url",
    "image_url_bare": "image_url",
    "image_url_missing": "image_url",
    "image_uuid": "image_url",
}
MALFORMED: set[MediaKind] = {"image_url_bare", "image_url_missing"}
MISSING_FILE = "missing.png"
WARMUP_PROMPT = {"image": "Describe the image.", "video": "Describe the video."}


@dataclass(frozen=True)
class MediaURLs:
    """Where each media kind is fetched from: the local asset server, or inline base64."""

    image_url: str
    image_b64: str
    video_url: str
    video_b64: str
    image_url_missing: str
    files: dict[str, Path]
    other: MediaURLs | None = None  # the other image and video (red square, circle)

    @classmethod
    def serve(cls, server: AssetServer, media: MediaSet) -> MediaURLs:
        other = cls.of(server, media.red_square_png, media.circle_video_mp4)
        main = cls.of(server, media.green_square_png, media.triangle_video_mp4)
        return replace(main, other=other, files={**main.files, **other.files})

    @classmethod
    def of(cls, server: AssetServer, image: Path, video: Path) -> MediaURLs:
        return cls(
            image_url=server.url_for(image.name),
            image_b64=data_url(image),
            video_url=server.url_for(video.name),
            video_b64=data_url(video),
            image_url_missing=server.url_for(MISSING_FILE),
            files={server.url_for(image.name): image, server.url_for(video.name): video},
        )

    def url(self, kind: MediaKind) -> str:
        return str(getattr(self, "image_url" if kind in ("image_url_bare", "image_uuid") else kind))

    def fetch(self, url: str) -> bytes:
        """Bytes behind one of our http URLs (for the token-count oracle, without HTTP)."""
        return self.files[url].read_bytes()


def chat_body(
    prompt: str,
    media: Iterable[MediaKind],
    max_tokens: int,
    urls: MediaURLs,
    uuid: str | None = None,
    as_model_sees_it: bool = False,
) -> dict[str, Any]:
    """`uuid`: every media part carries it; `as_model_sees_it`: a uuid-only part holds the image
    its uuid was sent with (what the model's own answer is computed on)."""
    parts: list[dict[str, Any]] = []
    for kind in media:
        part = PART_TYPE[kind]
        value: Any = {"url": urls.url(kind)}
        if kind == "image_url_bare":
            value = urls.url(kind)
        elif kind == "image_uuid" and not as_model_sees_it:
            value = None
        parts.append({"type": part, part: value} | ({"uuid": uuid} if uuid else {}))
    parts.append({"type": "text", "text": prompt})
    return {
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
    }


def request_body(
    request: RequestSpec,
    urls: MediaURLs,
    top_logprobs: int | None = None,
    as_model_sees_it: bool = False,
) -> dict[str, Any]:
    """The request as sent; `top_logprobs`: each token's log-probability and that many
    alternatives come back too (the CPU tier's logprobs oracle); `as_model_sees_it`: media sent
    by uuid alone as the image it names."""
    body = chat_body(
        request.prompt, request.media, request.max_tokens, urls, request.uuid, as_model_sees_it
    )
    if request.string_content:
        body["messages"][0]["content"] = request.prompt
    if top_logprobs:
        body |= {"logprobs": True, "top_logprobs": top_logprobs}
    return body


def fill_bodies(request: RequestSpec, urls: MediaURLs) -> list[dict[str, Any]]:
    """The requests that push `request.uuid`'s rows out of the engine's encoder cache
    (`encoder_cache_fills`): the case's image, each under a uuid of its own, one token each."""
    if not request.encoder_cache_fills:
        return []
    assert request.uuid is not None  # RequestSpec refuses fills without one
    return [
        chat_body(request.prompt, ["image_url"], 1, urls, f"{request.uuid}-fill-{n}")
        for n in range(1, request.encoder_cache_fills + 1)
    ]


def warmup_bodies(
    kinds: Iterable[MediaKind], urls: MediaURLs, text: bool = True
) -> list[dict[str, Any]]:
    """One short request per media kind so every stage has served before timing, and one with
    no media where the cases send one (`text`): Dynamo's SGLang E/PD encode worker, which faces
    the frontend, refuses a request with no media ("multi_modal_data is required")."""
    bodies = [chat_body("Say hello.", [], 2, urls)] if text else []
    for kind in sorted(set(kinds) - MALFORMED - {"image_uuid"}):  # uuid alone: nothing to warm
        bodies.append(chat_body(WARMUP_PROMPT[kind.split("_")[0]], [kind], 2, urls))
    return bodies
