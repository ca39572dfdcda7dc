"""Why an answer is not the model's own, in one line: where the input each role ran departs from the
model's (the media tokens usage implies against the processor's count, each role's own prompt
length) and the first answer token that differs from the model's own greedy answer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.oracles.processor import ProcessorCounts, load_processor

if TYPE_CHECKING:
    pass


def first_token_difference(
    tokenizer: Any, answer: str, reference_ids: list[int]
) -> tuple[int, str, str] | None:
    """(index, the answer's token, the model's token) at the first answer token that differs from
    the model's own, the answer re-tokenized; None when the tokens agree."""
    got = tokenizer(answer, add_special_tokens=False)["input_ids"]
    want = [i for i in reference_ids if i not in tokenizer.all_special_ids]
    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return index, tokenizer.decode([a]), tokenizer.decode([b])
    if len(got) == len(want):
        return None
    index = min(len(got), len(want))
    return index, _token_at(tokenizer, got, index), _token_at(tokenizer, want, index)


def _token_at(tokenizer: Any, ids: list[int], index: int) -> str:
    return tokenizer.decode(ids[index : index + 1]) or "<end>"


def describe_divergence(
    model_dir: Path | str,
    answer: str,
    reference_ids: list[int],
    prompt_tokens: int | None,
    counts: ProcessorCounts | None,
    ran: Mapping[str, int],
) -> str:
    """One line: the first differing token, the media tokens the usage implies against the
    processor's, each engine role's prompt. Example: "differs from the model's own answer; first
    differing token #0: 'der' where the model says 'red'; media tokens disagree: usage implies
    65, the processor counts 64; prompt tokens ran: prefill 115, decode 114 (processor 114)"."""
    tokenizer = load_processor(str(model_dir)).tokenizer
    parts = ["differs from the model's own answer"]
    diff = first_token_difference(tokenizer, answer, reference_ids)
    if diff is not None:
        parts.append(
            f"first differing token #{diff[0]}: {diff[1]!r} where the model says {diff[2]!r}"
        )
    if counts is not None and prompt_tokens is not None and counts.media:
        implied = counts.media_implied(prompt_tokens)
        verdict = "agree" if implied == counts.media else "disagree"
        parts.append(
            f"media tokens {verdict}: usage implies {implied}, the processor counts {counts.media}"
        )
    if ran and counts is not None:
        shown = ", ".join(f"{role} {n}" for role, n in ran.items())
        parts.append(f"prompt tokens ran: {shown} (processor {counts.prompt})")
    return "; ".join(parts)
