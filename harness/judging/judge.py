"""Judge one response against a request's expectations for the tier; raise a named failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.judging.baselines import BaselineStore
from harness.judging.chat_request import MediaURLs, fingerprint
from harness.judging.hf_reference import CPU_ENGINE_DTYPE, reference_answer
from harness.judging.oracles import (
    KeywordOracle,
    OracleResult,
    check_chat_structure,
    check_prompt_tokens,
    check_same_text,
)
from harness.judging.path_oracle import IMAGE_KINDS
from harness.judging.prompt_tokens import expected_prompt_tokens
from harness.profiles import Profile, RequestSpec, Tier


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

    def judge(
        self, request: RequestSpec, body: dict[str, Any], resp: requests.Response
    ) -> list[str]:
        """Checks that passed, one line each; raises TopologyFailure at the first that fails."""
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
        if request.cpu.prompt_tokens:
            expected = expected_prompt_tokens(self.model_dir, body["messages"], self.urls.fetch)
            if expected is None:
                raise fail(Cause.WRONG_ANSWER, "cannot compute expected prompt tokens here")
            expected += request.cpu.prompt_tokens_offset
            passed.append(self._must(check_prompt_tokens(data, expected)))
        if self.hf_reference:
            passed += self._reference(request, body, data)
        passed += self._cross_topology(request, data)
        return passed

    def _reference(self, request: RequestSpec, body: dict[str, Any], data: dict) -> list[str]:
        """The answer equals HF transformers' own greedy answer on the same checkpoint (the
        path the request's image travels: hf_reference.py). A request with a known defect must
        still show it: the reference must then differ."""
        through_encoder = any(r.discovery_component == "encode" for r in self.profile.worker_roles)
        has_image = any(kind in IMAGE_KINDS for kind in request.media)
        llava_encoder = through_encoder and has_image and self.profile.model.cpu == "llava"
        offset = request.cpu.prompt_tokens_offset if llava_encoder else None
        reference = reference_answer(
            self.model_dir, body, self.urls.fetch, CPU_ENGINE_DTYPE, offset
        )
        if reference is None:
            return []
        result = check_same_text(data, {"choices": [{"message": {"content": reference}}]})
        line = known_defect_holds(request, "hf_reference", result, "matches the HF reference: ")
        if line is not None:
            return [line]
        self.content_passed += 1
        return [self._must(result, "matches the HF reference: ")]

    def _record_baseline(self, request: RequestSpec, data: dict[str, Any]) -> None:
        own = (self.profile.stack, self.profile.model.short_name, self.profile.topology)
        self.baselines.record((*own, fingerprint(request)), self.signature, content_of(data))

    def _cross_topology(self, request: RequestSpec, data: dict[str, Any]) -> list[str]:
        stack, model = self.profile.stack, self.profile.model.short_name
        if not request.cpu.same_as or not self.cross_topology:
            return []
        key = (stack, model, request.cpu.same_as, fingerprint(request))
        baseline = self.baselines.get(key, other_than=self.signature)
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


def known_defect_holds(
    request: RequestSpec, oracle: str, result: OracleResult, prefix: str
) -> str | None:
    """Where the request declares a known defect for `oracle`: the line saying it still shows,
    or a failure once it no longer does. None where no defect is declared for it."""
    defect = request.cpu.known_defect
    if defect is None or oracle not in defect.oracles:
        return None
    if result.passed:
        raise fail(
            Cause.WRONG_ANSWER,
            f"{prefix}{result.detail}, but the profile declares a known defect here "
            f"({defect.why[:120]}): it no longer shows; remove it from known_defect",
        )
    return f"{prefix}known defect holds ({defect.why[:60]}…): {result.detail[:100]}"


def content_of(data: dict[str, Any]) -> str:
    try:
        return str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        return ""


def fail(cause: Cause, message: str) -> TopologyFailure:
    return TopologyFailure(cause, message, Evidence(phase="request"))
