"""Judge one response against a request's expectations for the tier; raise a named failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.judging.baselines import BaselineStore
from harness.judging.chat_request import MediaURLs, fingerprint
from harness.judging.oracles import (
    KeywordOracle,
    OracleResult,
    check_chat_structure,
    check_prompt_tokens,
    check_same_text,
)
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
        passed += self._cross_topology(request, data)
        return passed

    def _record_baseline(self, request: RequestSpec, data: dict[str, Any]) -> None:
        own = (self.profile.stack, self.profile.model.short_name, self.profile.topology)
        self.baselines.record((*own, fingerprint(request)), self.signature, content_of(data))

    def _cross_topology(self, request: RequestSpec, data: dict[str, Any]) -> list[str]:
        stack, model = self.profile.stack, self.profile.model.short_name
        if not request.cpu.same_as:
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


def content_of(data: dict[str, Any]) -> str:
    try:
        return str(data["choices"][0]["message"]["content"] or "")
    except (KeyError, IndexError, TypeError):
        return ""


def fail(cause: Cause, message: str) -> TopologyFailure:
    return TopologyFailure(cause, message, Evidence(phase="request"))
