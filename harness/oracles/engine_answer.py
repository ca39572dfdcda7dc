"""The answer held to its engine alone (engine_alone.py): the same engine, checkpoint, dtype and
engine arguments, run without Dynamo on the same media and the prompt the model's chat template
renders. Tokens and text equal, each token's log-probability within the engine's own tolerance
(`ENGINE_TOLERANCE`); where Dynamo returns no log-probabilities (SGLang multimodal), tokens and
text exactly. It judges Dynamo's part at any precision: the model's own answer (model_answer.py)
is as loose as the engine's numerics are far from transformers' (bfloat16: 1.43 nats), the engine
alone is not.

Where the two references disagree, the verdict says which: the engine alone agrees with the
served answer but the model does not -> the engine's own numerics, not Dynamo (`explains`);
the served answer differs from its engine alone -> Dynamo's part changed what the engine
computed, and the prompt each role ran names the role where it departs."""

from __future__ import annotations

import struct

from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import Answer, Scope
from harness.oracles.base import Answered, Oracle
from harness.oracles.checks import (
    LogprobVerdict,
    OracleResult,
    Step,
    check_same_text,
    compare_logprobs,
    engine_steps,
    excerpt,
)
from harness.oracles.engine_alone import EngineAloneError, NotComputedBefore
from harness.oracles.model_answer import special_tokens
from harness.oracles.processor import load_processor

# |served - engine alone| log-probability allowed, by (stack, dtype): 10x the largest gap measured
# over every shipped CPU case whose path computes what its engine does (the serve suite,
# 2026-12-06; docs/measurements.md, "The engine alone"), as the model's tolerance is set
# (core/precision.py). Zero where every gap was zero: held to the bit.
ENGINE_TOLERANCE: dict[tuple[str, str], float] = {
    # 0.0 on every agg, P/D, E/P/D video and Qwen3-VL router answer; 8.70e-06 on the Qwen2-VL
    # and 7.93e-06 on the Qwen2.5-VL KV-router cases, whose repeats the served engine computes on
    # prefix-cached blocks (the engine alone computes every prompt whole)
    ("dynamo-vllm", "float32"): 1e-4,
    # 0.0 on Qwen3.5's agg and KV-router cases: held to the bit
    ("dynamo-vllm", "bfloat16"): 0.0,
    # 1.16e-05 on the Qwen2.5-VL router (its radix cache), 0.0 to 1.9e-06 on the rest
    ("dynamo-sglang", "float32"): 1.2e-4,
}
# A stack and precision no shipped case measured: the bit, until a measurement says otherwise.
DEFAULT_TOLERANCE = 0.0
# The GPU tier, measured per (stack, served model: its checkpoint sets its precision, FP8 or
# bfloat16) by `python bench/engine_alone_gap.py --tier gpu` on a GPU runner (10x the largest gap,
# as above). None is measured yet: no GPU was lent to this project's sessions
# (docs/measurements.md, "The engine alone").
GPU_ENGINE_TOLERANCE: dict[tuple[str, str], float] = {}
# Until then: one bfloat16 rounding step of a logit between 16 and 32 (2**-3; a served and a lone
# engine that pick different kernels for one shape differ by a rounding or so), and a near-tie at
# that distance holds (compare_logprobs' near_ties: the chosen tokens may differ only where the
# engine alone's own log-probabilities are that close), as vLLM holds two implementations of one
# model to each other's top-k. Every such result says GPU_NOT_MEASURED.
GPU_DEFAULT_TOLERANCE = 2.0**-3
GPU_NOT_MEASURED = "tolerance not yet measured on a GPU"


def cpu_tolerance(stack: str, dtype: str) -> float:
    return ENGINE_TOLERANCE.get((stack, dtype), DEFAULT_TOLERANCE)


def engine_tolerance(scope: Scope) -> float:
    """The CPU tier's by stack and precision; the GPU tier's by stack and served model."""
    if scope.tier == "gpu":
        key = (scope.profile.stack, scope.profile.model.gpu)
        return GPU_ENGINE_TOLERANCE.get(key, GPU_DEFAULT_TOLERANCE)
    return cpu_tolerance(scope.profile.stack, scope.precision.dtype)


def unmeasured(scope: Scope) -> bool:
    """A GPU tolerance no runner has measured yet: the default, said in every result."""
    key = (scope.profile.stack, scope.profile.model.gpu)
    return scope.tier == "gpu" and key not in GPU_ENGINE_TOLERANCE


class EngineAloneAnswer(Answered):
    """The answer is its engine's own, run alone on the same inputs (on the GPU tier, before the
    launch: cases/engine_first.py)."""

    name = "matches its engine alone"
    order = 55
    reads_content = True
    defect = "engine_alone"
    prefix = "matches its engine alone: "

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and scope.settings.engine_alone

    def label(self, scope: Scope) -> str:
        tolerance = engine_tolerance(scope)
        if unmeasured(scope):
            return (
                f"matches its engine alone (logprobs within {tolerance:g}, near-ties held; "
                f"{GPU_NOT_MEASURED})"
            )
        return f"matches its engine alone (tokens exact, logprobs within {tolerance:g})"

    def check(self, answer: Answer) -> OracleResult:
        try:
            alone = answer.engine_answer
        except NotComputedBefore as exc:
            return OracleResult(True, f"not judged: {exc}", vouches=False)
        except EngineAloneError as exc:
            return OracleResult(False, f"the engine alone could not answer: {exc}")
        if alone is None:
            why = (
                "no engine alone this session"
                if answer.engines is None
                else ("no engine role recorded its launch")
            )
            return OracleResult(True, f"not judged: {why}", vouches=False)
        tokenizer = load_processor(answer.model_dir).tokenizer
        text = tokenizer.decode(alone.ids, skip_special_tokens=True)
        where = prompt_departure(answer, len(alone.prompt_ids))
        served = engine_steps(answer.data, special_tokens(answer.model_dir))
        if served is None:  # no log-probabilities through Dynamo: the text, exactly
            same = check_same_text(answer.data, as_answer(text), label=alone.engine)
            if same.passed:
                return OracleResult(
                    True, f"the same text as {alone.engine} (no log-probabilities came back)"
                )
            return OracleResult(
                False, f"{same.detail}{where}", role=where_role(answer, len(alone.prompt_ids))
            )
        gpu = answer.scope.tier == "gpu"
        tolerance = engine_tolerance(answer.scope)
        verdict = compare_logprobs(
            as_float32(served), as_float32(alone.steps), tolerance, near_ties=gpu
        )
        figures = {} if verdict.gap is None else {"engine_gap": verdict.gap}
        if departs_in_length(verdict, len(served), len(alone.steps)):
            verdict_text = (
                f"{len(served)} tokens where {alone.engine} gives {len(alone.steps)}: "
                f"{excerpt(answer.content)} against {excerpt(text)}"
            )
            return OracleResult(False, verdict_text + where, figures=figures)
        detail = verdict.result.detail.replace("the model", alone.engine)
        if unmeasured(answer.scope):
            detail = f"{detail} ({GPU_NOT_MEASURED})"
        if verdict.result.passed:
            return OracleResult(True, f"{detail}, against {alone.engine}", figures=figures)
        return OracleResult(
            False,
            f"{detail}, against {alone.engine}{where}",
            figures=figures,
            role=where_role(answer, len(alone.prompt_ids)),
        )

    def explains(self, failed: Oracle, failure: TopologyFailure, answer: Answer) -> str | None:
        """The model's own answer failed, the engine alone's holds: the engine's own numerics
        (how it computes against transformers), not a Dynamo fault."""
        if (
            failure.cause != Cause.WRONG_ANSWER
            or isinstance(failed, type(self))
            or failed.defect not in ("hf_reference", "logprobs")
            or not self.applies(answer.scope)
        ):
            return None
        if not self.check(answer).passed:
            return "the served answer differs from its engine alone too: Dynamo's part"
        return (
            "its engine alone answers the same: the difference from the model is the engine's "
            "own numerics, not a Dynamo fault"
        )


def departs_in_length(verdict: LogprobVerdict, served: int, alone: int) -> bool:
    """Every token compared agreed, yet one answer is longer: a departure, unless a near-tie
    (GPU) flipped a choice and nothing after it was compared."""
    return verdict.result.passed and verdict.tie_at is None and served != alone


def as_answer(text: str) -> dict[str, object]:
    return {"choices": [{"message": {"content": text}}]}


def as_float32(steps: list[Step]) -> list[Step]:
    """Each log-probability as the float32 the engine computed: Dynamo's JSON writes a float32
    as its shortest decimal, which widens to another float64 than the engine's own float32 does
    (6.65e-10 apart at -0.192, measured 2026-12-06): one value, two spellings."""

    def f32(value: float) -> float:
        return float(struct.unpack("f", struct.pack("f", value))[0])

    return [Step(s.token, f32(s.logprob), {t: f32(v) for t, v in s.top.items()}) for s in steps]


def prompt_departure(answer: Answer, alone_prompt: int) -> str:
    """Where the prompt the roles ran departs from the one the engine alone ran."""
    usage = answer.data.get("usage") if isinstance(answer.data, dict) else None
    served = (usage or {}).get("prompt_tokens")
    if not alone_prompt:
        return ""
    off = {role: n for role, n in answer.ran.items() if n != alone_prompt}
    if off:
        each = ", ".join(f"{role} ran {n}" for role, n in off.items())
        return f"; the engine alone ran a {alone_prompt}-token prompt, {each}"
    if served is not None and served != alone_prompt:
        return f"; the engine alone ran a {alone_prompt}-token prompt, the answer reports {served}"
    return ""


def where_role(answer: Answer, alone_prompt: int) -> str | None:
    """The first engine role whose prompt departs from the engine alone's."""
    return next(
        (role for role, n in answer.ran.items() if alone_prompt and n != alone_prompt), None
    )
