"""The CPU tier's precision per tiny-model family, and what each precision's answers are held to.

float32 wherever the engine's CPU kernels take it (every family but one): the engines' answers
then equal the model's own (transformers, float32) to 3e-5 in log-probability. A family whose
CPU kernels take no float32 runs in the precision they take; its reference is the model's own
answer at that precision and its tolerance is measured the same way (10x the largest gap on the
shipped cases). The tiny checkpoints are saved in their family's dtype (harness/tiny_models), the
role adapter gives every CPU engine `--dtype` of the family (harness/launch/plan.py
adapter_env), and the reference runs in it (harness/oracles/answer.py): one dtype per family,
from one table."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DTYPE = "float32"
FAMILY_DTYPE = {
    # vLLM 0.31's CPU Gated DeltaNet kernels: "CPU GDN attention requires BF16" (float32 and
    # float16 are refused; vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py, measured
    # 2026-12-05 on the tiny Qwen3.5)
    "qwen3_5": "bfloat16",
}


@dataclass(frozen=True)
class Precision:
    """What answers computed in `dtype` are held to against the model's own in the same dtype.
    `logprob_tolerance`: the largest |engine - model| log-probability of a chosen token allowed.
    `near_ties`: where the chosen tokens differ, the answer still holds if the model's own
    log-probability of the engine's token is within the tolerance of the model's choice (the
    rounding of that precision can flip a near-tie; vLLM's own tests accept the same,
    tests/models/utils.py check_logprobs_close), and nothing after it is compared (the two
    continue from different prefixes). `measured`: where the tolerance comes from."""

    dtype: str
    logprob_tolerance: float
    near_ties: bool
    measured: str


PRECISIONS = {
    "float32": Precision(
        "float32",
        3e-4,
        near_ties=False,
        measured=(
            "10x the largest |engine - model| log-probability over every shipped CPU case "
            "(3.07e-05, Qwen3-VL image requests, agg, E/PD and E/P/D alike); 10x under the "
            "smallest real corruption measured (a bfloat16 encoder, 3.07e-03); "
            "design-deviations.md at 7310361, issue 29. Gemma-4 (added 2026-12-05) reaches "
            "8.30e-05 over 100 tokens: 3.6x under the tolerance, not 10x"
        ),
    ),
    "bfloat16": Precision(
        "bfloat16",
        1.43,
        near_ties=True,
        measured=(
            "10x the largest |engine - model| log-probability over the shipped bfloat16 cases, "
            "both sides bfloat16 (0.143, Qwen3.5 agg; its router 0.122; 2026-12-05); bfloat16 "
            "catches far less than float32 (bench/precision_power.py, docs/measurements.md)"
        ),
    ),
}


def family_dtype(family: str | None) -> str:
    return FAMILY_DTYPE.get(family or "", DEFAULT_DTYPE)


def precision_of(dtype: str) -> Precision:
    """Example: precision_of("bfloat16").logprob_tolerance"""
    if dtype not in PRECISIONS:
        raise ValueError(f"no CPU-tier precision for dtype {dtype!r}; known: {sorted(PRECISIONS)}")
    return PRECISIONS[dtype]
