"""Judge one response against a request's expectations for the tier; raise a named failure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.judging.baselines import BaselineStore, Key
from harness.judging.chat_request import MediaURLs, fingerprint
from harness.judging.divergence import (
    ProcessorCounts,
    describe_divergence,
    processor_counts,
    role_prompt_check,
)
from harness.judging.hf_reference import CPU_ENGINE_DTYPE, reference_token_ids
from harness.judging.oracles import (
    KeywordOracle,
    OracleResult,
    check_chat_structure,
    check_prompt_tokens,
    check_same_text,
)
from harness.judging.oracles.result import excerpt
from harness.judging.path_oracle import IMAGE_KINDS
from harness.judging.prompt_tokens import load_processor
from harness.profiles import Profile, RequestSpec, Tier

REFERENCE = "matches the model's own answer: "
OTHER_MEDIA = "|other media"  # a baseline key's suffix: the answer with the other image/video
SHORT = 40  # characters of an answer quoted inside a diagnosis
DETAIL_CHARS = 600  # of a held defect's detail in the results: the diagnosis and an excerpt


@dataclass
class CaseJudge:
    profile: Profile
    tier: Tier
    model_dir: str
    urls: MediaURLs
    baselines: BaselineStore
    signature: str
    content_passed: int = 0  # oracles that read an answer's content and passed (keywords, same as)
    hf_reference: bool = True  # CPU: compare with HF transformers' own answer (hf_reference.py)
    cross_topology: bool = True  # CPU: equal to a baseline topology's answer (same_as)
    # False: a declared upstream defect excuses nothing: its oracles judge as if undeclared and
    # a failure names it (both sides of an unpatched-versus-patched proof, `harness validate`).
    excuse_defects: bool = True

    def judge(
        self,
        request: RequestSpec,
        body: dict[str, Any],
        resp: requests.Response,
        ran: Mapping[str, int] | None = None,
    ) -> list[str]:
        """Checks that passed, one line each; raises TopologyFailure at the first that fails.
        `ran`: the prompt tokens each engine role ran for this request (its own counter)."""
        expect = request.gpu if self.tier == "gpu" else request.cpu
        if resp.status_code != expect.status:
            cause = Cause.HTTP_ERROR if expect.status == 200 else Cause.WRONG_ANSWER
            got = f"HTTP {resp.status_code}, expected {expect.status}"
            raise fail(cause, f"{got}: {resp.text[:300]}")
        if expect.status != 200:
            needle = getattr(expect, "error_contains", None)
            if needle and needle.lower() not in resp.text.lower():
                raise fail(Cause.WRONG_ANSWER, f"error body lacks {needle!r}: {resp.text[:300]}")
            return [f"HTTP {resp.status_code} as expected"]
        data = resp.json()
        passed = [self._must(check_chat_structure(resp.status_code, data))]
        if self.tier == "cpu":
            self._record_baseline(request, data)
        if self.tier == "gpu":
            if request.gpu.all_of or request.gpu.any_of:
                oracle = KeywordOracle(all_of=request.gpu.all_of, any_of=request.gpu.any_of)
                passed.append(self._must(oracle.check(content_of(data))))
                self.content_passed += 1
            return passed
        counts = None
        if request.cpu.prompt_tokens or ran or self.hf_reference:
            counts = processor_counts(self.model_dir, body["messages"], self.urls.fetch)
        if request.cpu.prompt_tokens:
            if counts is None:
                raise fail(Cause.WRONG_ANSWER, "cannot compute expected prompt tokens here")
            result = check_prompt_tokens(data, counts.prompt)
            passed.append(self.held(request, "prompt_tokens", result))
        if ran and counts is not None:
            result = role_prompt_check(ran, counts, self._through_encoder(request))
            passed.append(self.held(request, "role_prompts", result))
        if self.hf_reference:
            passed += self._reference(request, body, data, counts, ran or {})
        passed += self._cross_topology(request, data)
        return passed

    def _reference(
        self,
        request: RequestSpec,
        body: dict[str, Any],
        data: dict,
        counts: ProcessorCounts | None,
        ran: Mapping[str, int],
    ) -> list[str]:
        """The answer equals the model's own: HF transformers' greedy `generate` on the raw
        media, whatever path the request travelled (hf_reference.py). Where it does not, the
        failure says where the input departed (divergence.py)."""
        reference_ids = reference_token_ids(self.model_dir, body, self.urls.fetch, CPU_ENGINE_DTYPE)
        if reference_ids is None:
            return []
        tokenizer = load_processor(self.model_dir).tokenizer
        reference = tokenizer.decode(reference_ids, skip_special_tokens=True)
        model_says = {"choices": [{"message": {"content": reference}}]}
        result = check_same_text(data, model_says, label="the model's answer")
        if not result.passed:
            usage = data.get("usage") or {}
            prompt = usage.get("prompt_tokens")
            why = describe_divergence(self.model_dir, content_of(data), reference_ids, prompt,
                                      counts, ran)  # fmt: skip
            if self._through_encoder(request) and self._lengths_agree(prompt, counts, ran):
                why += ("; the lengths agree, so the values differ: the encode worker's "
                        "embeddings are not the model's vision features")  # fmt: skip
            result = OracleResult(False, f"{why}; {result.detail}" if why else result.detail)
        line = self.held(request, "hf_reference", result, REFERENCE)
        if result.passed:
            self.content_passed += 1
        return [line]

    def held(
        self, request: RequestSpec, oracle: str, result: OracleResult, prefix: str = ""
    ) -> str:
        """The line of an oracle that held, where a request's declared defect says how it must
        come out. Raises where it did not: a failing oracle, or a declared defect that no longer
        shows (the defect is gone: remove the declaration)."""
        defect = request.cpu.known_defect if self.tier == "cpu" else None
        declared = defect is not None and oracle in defect.oracles
        if not declared:
            return self._must(result, prefix)
        assert defect is not None
        if not self.excuse_defects:  # judged as if undeclared; a failure names the defect
            if result.passed:
                return prefix + result.detail
            raise fail(Cause.WRONG_ANSWER, f"{prefix}{result.detail} [{defect.describe()}]")
        if result.passed:
            raise fail(
                Cause.WRONG_ANSWER,
                f"{prefix}{result.detail}, but the profile declares upstream defect {defect.id} "
                f"here ({oracle} must fail while it shows): it no longer shows; remove the "
                "known_defect declaration",
            )
        return f"{prefix}upstream defect {defect.id} holds: {result.detail[:DETAIL_CHARS]}"

    def _record_baseline(self, request: RequestSpec, data: dict[str, Any]) -> None:
        self.baselines.record(self._key(request), self.signature, content_of(data))

    def _key(self, request: RequestSpec, topology: str | None = None, twin: bool = False) -> Key:
        stack, model = self.profile.stack, self.profile.model.short_name
        return (stack, model, topology or self.profile.topology,
                fingerprint(request) + (OTHER_MEDIA if twin else ""))  # fmt: skip

    def record_twin(self, request: RequestSpec, content: str) -> None:
        """The answer to the request with the other image/video (media_relations.py)."""
        self.baselines.record(self._key(request, twin=True), self.signature, content)

    def _through_encoder(self, request: RequestSpec) -> bool:
        """The request's image travels through an encode worker (encode workers take images)."""
        encoder = any(r.discovery_component == "encode" for r in self.profile.worker_roles)
        return encoder and any(kind in IMAGE_KINDS for kind in request.media)

    @staticmethod
    def _lengths_agree(
        prompt: int | None, counts: ProcessorCounts | None, ran: Mapping[str, int]
    ) -> bool:
        if counts is None or prompt != counts.prompt:
            return False
        return all(n == counts.prompt for n in ran.values())

    def media_blind_why(self, request: RequestSpec) -> str:
        """Where a request's image travels through an encode worker and the other image answers
        alike: whether the aggregated path's answers to the same two requests differ (then the
        encoder's embeddings, not the model, ignore the image)."""
        if not self._through_encoder(request):
            return ""
        agg = self.baselines.get(self._key(request, "agg"), other_than=self.signature)
        twin = self.baselines.get(self._key(request, "agg", twin=True), other_than=self.signature)
        if agg is None or twin is None:
            return "; no aggregated answer to the same two requests in this session to compare"
        if agg == twin:
            return "; the aggregated path answers both images alike too"
        return (
            "; the encode worker's answers do not depend on the image while the aggregated "
            f"path's do (agg: {excerpt(agg, SHORT)} for this image, {excerpt(twin, SHORT)} for "
            "the other)"
        )

    def _cross_topology(self, request: RequestSpec, data: dict[str, Any]) -> list[str]:
        if not request.cpu.same_as or not self.cross_topology:
            return []
        baseline = self.baselines.get(
            self._key(request, request.cpu.same_as), other_than=self.signature
        )
        if baseline is None:
            raise fail(
                Cause.WRONG_ANSWER,
                f"no {request.cpu.same_as} baseline recorded in this session for this request; "
                f"run the {request.cpu.same_as} profile of {self.profile.model.short_name} too",
            )
        baseline_body = {"choices": [{"message": {"content": baseline}}]}
        result = check_same_text(data, baseline_body)
        checked = self._must(result, prefix=f"same as {request.cpu.same_as}: ")
        self.content_passed += 1
        return [checked]

    @staticmethod
    def _must(result: OracleResult, prefix: str = "") -> str:
        if not result.passed:
            raise fail(Cause.WRONG_ANSWER, prefix + result.detail)
        return prefix + result.detail


def content_of(data: dict[str, Any]) -> str:
    try:
        return str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        return ""


def fail(cause: Cause, message: str) -> TopologyFailure:
    return TopologyFailure(cause, message, Evidence(phase="request"))
