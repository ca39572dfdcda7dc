"""Metamorphic media checks: requests derived from a judged one, whose answers must relate to its
answer in a known way whatever the model's weights are.

- `other media`: the same prompt with each image or video swapped for the other one (the red
  square, the moving circle). On CPU the answer must differ (a tiny random model still sees its
  input: an encoder that returns zeros, or a worker that ignores the media, answers the same); on
  GPU it must name what the other medium shows (`alt_any_of`, e.g. red).
- `other transport` (CPU): the same media by the other transport (URL <-> base64) on the same
  launch must answer identically: both reach the model as the same pixels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.oracles.checks import KeywordOracle, OracleResult, check_same_text, excerpt
from harness.profiles import MediaKind, RequestSpec, Tier
from harness.requests.chat import MediaURLs, request_body

OTHER_TRANSPORT: dict[MediaKind, MediaKind] = {
    "image_url": "image_b64", "image_b64": "image_url",
    "video_url": "video_b64", "video_b64": "video_url",
}  # fmt: skip


@dataclass(frozen=True)
class MediaRelation:
    name: str
    body: dict[str, Any]
    same: bool | None  # answer equal to (True) / different from (False) the judged one; None: GPU
    any_of: tuple[str, ...] = ()  # GPU: words the answer must name


def relations(request: RequestSpec, urls: MediaURLs, tier: Tier) -> list[MediaRelation]:
    """The derived requests of one judged 200 request (none for a request without media)."""
    if not request.media or any(kind not in OTHER_TRANSPORT for kind in request.media):
        return []
    other = urls.other
    assert other is not None, "MediaURLs.serve gives every medium its other"
    swapped = request_body(request, other)
    if tier == "gpu":
        if not request.gpu.alt_any_of:
            return []
        return [MediaRelation("other media", swapped, None, tuple(request.gpu.alt_any_of))]
    transport = request.model_copy(update={"media": [OTHER_TRANSPORT[k] for k in request.media]})
    return [
        MediaRelation("other media", swapped, same=False),
        MediaRelation("other transport", request_body(transport, urls), same=True),
    ]


def relation_kinds(request: RequestSpec, tier: Tier) -> list[str]:
    """The names of the relations `relations` builds for this request (no bodies built)."""
    if not request.media or any(kind not in OTHER_TRANSPORT for kind in request.media):
        return []
    if tier == "gpu":
        return ["other media"] if request.gpu.alt_any_of else []
    return ["other media", "other transport"]


def judge_relation(relation: MediaRelation, answer: str, status: int, derived: str) -> OracleResult:
    """The derived request's answer (`derived`, HTTP `status`) against the judged `answer`."""
    label = f"{relation.name}: "
    if status != 200:
        return OracleResult(False, f"{label}HTTP {status}, expected 200")
    if relation.same is True:
        same = check_same_text(_body(derived), _body(answer))
        return OracleResult(same.passed, label + same.detail)
    if relation.same is False:
        if derived == answer:
            return OracleResult(
                False,
                f"{label}the same answer for the other image/video ({excerpt(answer)}): the "
                "media did not reach the model, or reached it as nothing",
            )
        return OracleResult(True, f"{label}a different answer ({excerpt(derived)})")
    found = KeywordOracle(any_of=relation.any_of).check(derived)
    return OracleResult(found.passed, label + found.detail)


def _body(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"content": content}}]}
