"""The answer held to the model's own (transformers on the raw media): its text, and on the CPU
tier its log-probabilities within the precision's tolerance."""

from __future__ import annotations

from harness.oracles.answer import Answer, Scope
from harness.oracles.base import Answered, Flow
from harness.oracles.checks import (
    OracleResult,
    check_same_text,
    compare_logprobs,
    engine_steps,
    rejudged_in_float64,
)
from harness.oracles.divergence import describe_divergence
from harness.oracles.model_reference import TOP_LOGPROBS
from harness.oracles.processor import load_processor


class ModelAnswer(Answered):
    """CPU: the answer is the model's own (HF transformers on the raw media, model_reference.py),
    whatever path the request took; where it is not, where the input departed."""

    name = "matches the model's own answer"
    order = 60
    tier = "cpu"
    reads_content = True
    defect = "hf_reference"
    prefix = "matches the model's own answer: "

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and scope.settings.model_answer

    def check(self, answer: Answer) -> OracleResult:
        ids = answer.reference_ids
        if ids is None:
            return OracleResult(True, "no reference computable for this media", vouches=False)
        tokenizer = load_processor(answer.model_dir).tokenizer
        reference = tokenizer.decode(ids, skip_special_tokens=True)
        model_says = {"choices": [{"message": {"content": reference}}]}
        result = check_same_text(answer.data, model_says, label="the model's answer")
        if result.passed:
            return result
        near_tie = self.near_tie(answer)
        if near_tie is not None:
            return near_tie
        prompt = (answer.data.get("usage") or {}).get("prompt_tokens")
        why = describe_divergence(
            answer.model_dir, answer.content, ids, prompt, answer.counts, answer.ran
        )
        counts = answer.counts
        agree = counts is not None and prompt == counts.prompt
        on_rows = answer.rows_reference
        if on_rows is not None:  # the encoder's own rows tell which side of it departed
            if on_rows.ids == answer.reference_ids:
                why += (
                    "; the model's language model on the encoder's own rows answers as the "
                    "model does: the departure is after the encoder (the transfer, or a "
                    "worker's computation)"
                )
            elif tokenizer.decode(on_rows.ids, skip_special_tokens=True) == answer.content:
                why += "; the encoder's own rows give this answer: the departure is the encoder's"
        elif (
            answer.scope.through_encoder
            and agree
            and counts is not None
            and all(n == counts.prompt for n in answer.ran.values())
        ):
            why += (
                "; the lengths agree, so the values differ: the encode worker's embeddings "
                "are not the model's vision features"
            )
        return OracleResult(False, f"{why}; {result.detail}")

    @staticmethod
    def near_tie(answer: Answer) -> OracleResult | None:
        """Where the checkpoint's precision can flip a near-tie (core/precision.py): the answer
        holds if it is the model's own up to a token where the two choices were within the
        tolerance in the model's own log-probabilities. None: no such tie."""
        precision, reference = answer.precision, answer.reference
        if not precision.near_ties or reference is None:
            return None
        engine = engine_steps(answer.data, special_tokens(answer.model_dir))
        if engine is None:
            return None
        verdict = compare_logprobs(engine, reference.steps, precision.logprob_tolerance, True)
        if not verdict.result.passed or verdict.tie_at is None:
            return None
        why = f"the model's own answer up to a {precision.dtype} near-tie: {verdict.result.detail}"
        return OracleResult(True, why)


class LogProbs(Answered):
    """CPU: each token's log-probability and top-k are the model's own (model_reference.py), within
    the tolerance of the checkpoint's precision (core/precision.py; float32 on both sides:
    3e-4), whatever path the request took: catches a small numeric corruption the greedy text
    survives."""

    name = "log-probabilities"
    order = 70
    tier = "cpu"
    reads_content = True
    defect = "logprobs"
    flow = Flow.NUMBERS

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and scope.settings.model_answer

    def label(self, scope: Scope) -> str:
        precision = scope.precision
        within = f"logprobs within {precision.logprob_tolerance:g} of the model's own"
        if not precision.near_ties:
            return f"{within}, top-{TOP_LOGPROBS}"
        return f"{within} (both {precision.dtype}, near-ties allowed), top-{TOP_LOGPROBS}"

    def check(self, answer: Answer) -> OracleResult:
        reference = answer.reference
        if reference is None:
            return OracleResult(True, "no reference computable for this media", vouches=False)
        engine = engine_steps(answer.data, special_tokens(answer.model_dir))
        if engine is None:
            return OracleResult(
                False, f"the answer carries no logprobs (asked for top_logprobs={TOP_LOGPROBS})"
            )
        precision = answer.precision
        tolerance = precision.logprob_tolerance
        verdict = compare_logprobs(engine, reference.steps, tolerance, precision.near_ties)
        if not verdict.result.passed and precision.dtype == "float32":
            exact = answer.exact_reference
            verdict = rejudged_in_float64(
                engine, reference.steps, exact.steps if exact else None, tolerance, verdict
            )
        detail = f"log-probabilities: {verdict.result.detail}"
        figures = {} if verdict.gap is None else {"logprob_gap": verdict.gap}
        return OracleResult(verdict.result.passed, detail, figures=figures)


def special_tokens(model_dir: str) -> set[str]:
    """The tokenizer's special tokens by name (added ones, e.g. <|vision_pad|>, included)."""
    tokenizer = load_processor(model_dir).tokenizer
    added = getattr(tokenizer, "added_tokens_decoder", {}).values()
    return {*tokenizer.all_special_tokens, *(t.content for t in added if t.special)}
