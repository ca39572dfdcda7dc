"""Answers held to other answers: the same request on a baseline topology this session, and its
metamorphic twins (the other media answers differently, the other transport the same)."""

from __future__ import annotations

from typing import Any

from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import Answer, Scope, answer_text
from harness.oracles.base import SHORT, Answered, Oracle
from harness.oracles.baselines import Key
from harness.oracles.checks import (
    MediaRelation,
    OracleResult,
    check_same_text,
    excerpt,
    judge_relation,
    relations,
)
from harness.payloads.chat import MediaURLs, request_body


class SameAs(Answered):
    """CPU: the answer equals a baseline topology's answer to the same request this session."""

    name = "same as"
    order = 80
    tier = "cpu"
    reads_content = True

    def applies(self, scope: Scope) -> bool:
        cpu = scope.request.cpu
        return super().applies(scope) and bool(cpu.same_as) and scope.settings.cross_topology

    def label(self, scope: Scope) -> str:
        return f"same as {scope.request.cpu.same_as}"

    def check(self, answer: Answer) -> OracleResult:
        wanted = answer.request.cpu.same_as
        key = answer.scope.key(wanted)
        baseline = answer.baselines.get(key, other_than=answer.signature)
        failed = answer.baselines.failure(key)
        if failed:
            return OracleResult(True, f"same as {wanted}: not judged: baseline {failed}", False)
        if baseline is None:
            stack, model = key[0], key[1]
            if not answer.baselines.ran(key, other_than=answer.signature):  # nothing to hold
                return OracleResult(
                    True,
                    f"same as {wanted}: not judged: baseline {wanted} of {model} ({stack}) was "
                    f"not run in this session",
                    False,
                )
            return OracleResult(
                False,
                f"same as {wanted}: the {wanted} baseline of {model} ran in this session but "
                "recorded no answer to this request (its profile sends another one?)",
            )
        result = check_same_text(answer.data, {"choices": [{"message": {"content": baseline}}]})
        return OracleResult(result.passed, f"same as {wanted}: {result.detail}")


class Relation(Answered):
    """A metamorphic twin of the request, sent on the same launch (checks.py, `relations`)."""

    relation: str  # the relation's name in checks.relations

    def applies(self, scope: Scope) -> bool:
        if not (super().applies(scope) and scope.settings.relations):
            return False
        return any(r.name == self.relation for r in relations(scope.request, scope.tier))

    def twin(self, scope: Scope) -> MediaRelation:
        return next(r for r in relations(scope.request, scope.tier) if r.name == self.relation)

    def sends(self, scope: Scope, urls: MediaURLs) -> dict[str, dict[str, Any]]:
        twin = self.twin(scope)
        media = urls.other if twin.other_media else urls
        assert media is not None, "MediaURLs.serve gives every medium its other"
        # no uuid: under the request's own uuid a cache would serve the twin the request's rows
        derived = scope.request.model_copy(update={"media": list(twin.media), "uuid": None})
        return {self.relation: request_body(derived, media)}

    def check(self, answer: Answer) -> OracleResult:
        resp = answer.sent.get(self.relation)
        if resp is None:
            return OracleResult(False, f"the {self.relation} twin was not sent")
        twin = self.twin(answer.scope)
        result = judge_relation(twin, answer.content, resp.status_code, answer_text(resp))
        blind = resp.status_code == 200 and twin.same is False and answer.scope.tier == "cpu"
        if blind and not result.passed:
            result = OracleResult(False, result.detail + media_blind_why(answer))
        return result


class OtherMedia(Relation):
    """The other image/video answers differently (CPU) or names what it shows (GPU)."""

    name = "other media"
    order = 100
    relation = "other media"
    reads_content = True
    defect = "other_media"

    def label(self, scope: Scope) -> str:
        if scope.tier == "gpu":
            return f"other media names {scope.request.gpu.alt_any_of}"
        return "other media answers differently"

    def baselines(self, answer: Answer) -> dict[Key, str]:
        """CPU: the other media's answer, for the media-blind diagnosis of later launches."""
        twin = answer.sent.get(self.relation)
        if answer.scope.tier != "cpu" or twin is None or twin.status_code != 200:
            return {}
        return {answer.scope.key(twin=True): answer_text(twin)}

    def explains(self, failed: Oracle, failure: TopologyFailure, answer: Answer) -> str | None:
        """A wrong answer to an image that went through an encode worker, where the other image
        answers alike there but not on a path without one: the encoder's embeddings ignore the
        image (pixels normalised twice, say), not the model."""
        sent = answer.sent.get(self.relation)
        if (
            answer.scope.tier != "cpu"
            or failure.cause != Cause.WRONG_ANSWER
            or isinstance(failed, type(self))
            or not answer.scope.through_encoder
            or not self.applies(answer.scope)
            or sent is None
            or sent.status_code != 200
        ):
            return None
        why = media_blind_why(answer)
        if self.check(answer).passed or not why:
            return None
        return why.removeprefix("; ")


class OtherTransport(Relation):
    """CPU: the same media by the other transport (URL and base64) answers the same."""

    name = "other transport answers the same"
    order = 110
    relation = "other transport"
    reads_content = True
    tier = "cpu"


def media_blind_why(answer: Answer) -> str:
    """Where a request's image travels through an encode worker and the other image answers
    alike: whether a path without an encode worker answers the same two requests differently
    this session (then the encoder's embeddings, not the model, ignore the image)."""
    scope = answer.scope
    if not scope.through_encoder:
        return ""
    agg = answer.baselines.unencoded(scope.key(), other_than=answer.signature)
    twin = answer.baselines.unencoded(scope.key(twin=True), other_than=answer.signature)
    if agg is None or twin is None:
        return "; no aggregated answer to the same two requests in this session to compare"
    if agg == twin:
        return "; the aggregated path answers both images alike too"
    return (
        "; the encode worker's answers do not depend on the image while the aggregated "
        f"path's do (agg: {excerpt(agg, SHORT)} for this image, {excerpt(twin, SHORT)} for "
        "the other)"
    )
