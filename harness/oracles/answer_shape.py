"""What an answer must look like before its content is read: the status, the chat structure, its
keywords (GPU), the prompt tokens against the processor's, the frontend's image-token tally, and
what each engine role reports it was prompted with."""

from __future__ import annotations

from harness.core.verdict import Cause
from harness.oracles.answer import Answer, Scope
from harness.oracles.base import Answered, Flow, Oracle
from harness.oracles.checks import (
    KeywordOracle,
    OracleResult,
    check_chat_structure,
    check_prompt_tokens,
)
from harness.oracles.processor import role_prompt_check
from harness.topology.role_metrics import IMAGE_TOKENS


class Status(Oracle):
    """The HTTP status the request expects; a refusal names the error it must name."""

    name = "status"
    order = 10
    flow = Flow.SHAPE

    def applies(self, scope: Scope) -> bool:
        return True

    def label(self, scope: Scope) -> str:
        status = scope.expect_status
        return f"HTTP {status} naming the error" if status != 200 else "status 200"

    def check(self, answer: Answer) -> OracleResult:
        expect = answer.request.gpu if answer.scope.tier == "gpu" else answer.request.cpu
        resp = answer.resp
        if resp.status_code != expect.status:
            got = f"HTTP {resp.status_code}, expected {expect.status}"
            cause = Cause.HTTP_ERROR if expect.status == 200 else None  # else: a wrong answer
            return OracleResult(False, f"{got}: {resp.text[:300]}", cause=cause)
        needle = expect.error_contains
        if expect.status != 200 and needle and needle.lower() not in resp.text.lower():
            return OracleResult(False, f"error body lacks {needle!r}: {resp.text[:300]}")
        return OracleResult(True, f"HTTP {resp.status_code} as expected")


class Structure(Answered):
    name = "structure"
    order = 20
    flow = Flow.SHAPE

    def check(self, answer: Answer) -> OracleResult:
        return check_chat_structure(answer.resp.status_code, answer.data)


class Keywords(Answered):
    """GPU: the answer names what the media shows (whole words, denials do not count)."""

    name = "keywords"
    order = 30
    tier = "gpu"
    reads_content = True

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and bool(scope.request.gpu.all_of or scope.request.gpu.any_of)

    def label(self, scope: Scope) -> str:
        return f"names {[*scope.request.gpu.all_of, *scope.request.gpu.any_of]}"

    def check(self, answer: Answer) -> OracleResult:
        gpu = answer.request.gpu
        return KeywordOracle(all_of=gpu.all_of, any_of=gpu.any_of).check(answer.content)


class PromptTokens(Answered):
    """CPU: `usage.prompt_tokens` is the model's own HF processor count."""

    name = "prompt tokens"
    order = 40
    tier = "cpu"
    defect = "prompt_tokens"

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and scope.request.cpu.prompt_tokens

    def check(self, answer: Answer) -> OracleResult:
        if answer.counts is None:
            return OracleResult(False, "cannot compute expected prompt tokens here")
        return check_prompt_tokens(answer.data, answer.counts.prompt)


class ImageTokens(Answered):
    """The frontend's own image-token metric took the request: its histogram counted one
    image-bearing request, and on the CPU tier the image placeholder tokens the model's
    processor places (upstream's image_token_metrics check)."""

    name = "image-token metric"
    order = 45

    def applies(self, scope: Scope) -> bool:
        wanted = scope.request.image_token_metrics and scope.settings.frontend_metrics
        return super().applies(scope) and wanted

    def label(self, scope: Scope) -> str:
        counted = "the processor's image tokens" if scope.tier == "cpu" else "its image tokens"
        return f"the frontend's image-token metric counts the request and {counted}"

    def check(self, answer: Answer) -> OracleResult:
        moved = answer.image_tokens
        if moved is None:
            return OracleResult(False, "image-token metric: the frontend's /metrics did not answer")
        if moved.requests != 1:
            return OracleResult(
                False,
                f"image-token metric: {IMAGE_TOKENS}_count moved by {moved.requests:g}, "
                "expected 1 (the frontend recorded no image tokens for this request)",
            )
        if answer.scope.tier == "gpu" or answer.counts is None:
            ok = moved.tokens >= 1
            return OracleResult(ok, f"image-token metric: 1 request, {moved.tokens:g} tokens")
        want = answer.counts.images
        return OracleResult(
            moved.tokens == want,
            f"image-token metric: 1 request, {moved.tokens:g} image tokens "
            + ("==" if moved.tokens == want else "!=")
            + f" the processor's {want}",
        )


class RolePrompts(Answered):
    """CPU: every engine role ran the prompt the model's processor builds (its own counter)."""

    name = "role prompts"
    order = 50
    tier = "cpu"
    defect = "role_prompts"

    def check(self, answer: Answer) -> OracleResult:
        if not answer.ran or answer.counts is None:
            return OracleResult(True, "no engine role reported its prompt", vouches=False)
        return role_prompt_check(answer.ran, answer.counts, answer.scope.through_encoder)
