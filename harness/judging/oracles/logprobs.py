"""An answer held to the model's own log-probabilities, token by token, as vLLM's own model tests
hold an engine to transformers (`check_logprobs_close` in vllm/tests/models/utils.py), and
stricter: both sides run float32 here, so besides "each side's token is in the other's top-k"
the chosen token's log-probability must agree within a tolerance, and so must every top-k token
that is clear of the k-th by more than the tolerance (the set may differ only where two
candidates are that close)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from harness.judging.oracles.result import OracleResult


@dataclass(frozen=True)
class Step:
    """One generated token: its text, its log-probability, the top-k {text: log-probability}."""

    token: str
    logprob: float
    top: dict[str, float]


@dataclass(frozen=True)
class LogprobVerdict:
    result: OracleResult
    gap: float | None  # the largest |engine - model| log-probability of a chosen token compared


def engine_steps(data: object, special: Collection[str] = ()) -> list[Step] | None:
    """The steps of an OpenAI chat answer's `choices[0].logprobs.content`; None if absent.
    `special`: the tokenizer's special tokens, rendered '' as the engine renders a chosen one
    (its top-k lists them by name)."""
    try:
        content = data["choices"][0]["logprobs"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, list):
        return None

    def text(token: object) -> str:
        return "" if str(token) in special else str(token)

    return [
        Step(text(s["token"]), float(s["logprob"]),
             {text(t["token"]): float(t["logprob"]) for t in s.get("top_logprobs") or []})
        for s in content
    ]  # fmt: skip


def compare_logprobs(engine: list[Step], model: list[Step], tolerance: float) -> LogprobVerdict:
    """Position by position up to the shorter answer (a trailing end-of-sequence token may be
    on one side only). Fails at the first position where the chosen tokens differ, a chosen
    token's log-probability is more than `tolerance` off, or the top-k sets differ beyond it."""
    gap = 0.0
    for i, (ours, theirs) in enumerate(zip(engine, model, strict=False)):
        at = f"token {i}"
        if ours.token != theirs.token:
            return LogprobVerdict(OracleResult(False, (
                f"{at}: the answer chose {ours.token!r} (logprob {ours.logprob:.6f}), the model "
                f"chose {theirs.token!r} (logprob {theirs.logprob:.6f}; the answer's token has "
                f"{_lp(theirs.top, ours.token)} there)"
            )), gap)  # fmt: skip
        delta = abs(ours.logprob - theirs.logprob)
        gap = max(gap, delta)
        if delta > tolerance:
            return LogprobVerdict(OracleResult(False, (
                f"{at} {ours.token!r}: logprob {ours.logprob:.6f}, the model's "
                f"{theirs.logprob:.6f} (|gap| {delta:.2e} > {tolerance:g}); the texts agree so "
                "far"
            )), gap)  # fmt: skip
        missing = _clear_of_kth(theirs.top, tolerance) - ours.top.keys()
        extra = _clear_of_kth(ours.top, tolerance) - theirs.top.keys()
        if missing or extra:
            return LogprobVerdict(OracleResult(False, (
                f"{at} {ours.token!r}: top-{len(theirs.top)} differs beyond {tolerance:g}: "
                f"the model's {sorted(missing)} missing from the answer's, the answer's "
                f"{sorted(extra)} not in the model's"
            )), gap)  # fmt: skip
    n = min(len(engine), len(model))
    return LogprobVerdict(
        OracleResult(True, f"{n} tokens, largest |gap| {gap:.2e} (tolerance {tolerance:g})"), gap
    )


def _clear_of_kth(top: dict[str, float], tolerance: float) -> set[str]:
    """The top-k tokens more than `tolerance` above the k-th: the other side must list them."""
    if not top:
        return set()
    kth = min(top.values())
    return {token for token, lp in top.items() if lp - kth > tolerance}


def _lp(top: dict[str, float], token: str) -> str:
    return f"logprob {top[token]:.6f}" if token in top else "no place in its top-k"
