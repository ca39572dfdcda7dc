"""Why an answer is not the model's own: where the input each role ran departs from the model's.

Three facts, each read from something the code under test does not compute:
- the media tokens: `usage.prompt_tokens` minus the text the model's processor counts, against
  the processor's own media-token count (LLaVA-1.5 through Dynamo 1.6.1's encode worker: 65
  against 64, the CLS row kept);
- each engine role's prompt, from its own `vllm:prompt_tokens_total` (generate_counter.py): an
  E/P/D decode worker that runs a prompt of another length than the prefill whose KV it
  imported (prefill 115, decode 114) names the role whose input diverged;
- the first answer token that differs from the model's own greedy answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.judging.oracles import OracleResult
from harness.judging.prompt_tokens import MediaFetcher, load_processor, processor_inputs


@dataclass(frozen=True)
class ProcessorCounts:
    """The model processor's own counts for one request."""

    prompt: int  # every prompt token
    media: int  # image and video placeholder tokens among them

    def media_implied(self, prompt_tokens: int) -> int:
        """Media tokens a reported prompt length implies, the text being the processor's."""
        return prompt_tokens - (self.prompt - self.media)


def processor_counts(
    model_dir: Path | str, messages: list[dict[str, Any]], media: MediaFetcher
) -> ProcessorCounts | None:
    """None where the processor cannot mirror vLLM's preprocessing (prompt_tokens.py)."""
    inputs = processor_inputs(model_dir, messages, media)
    if inputs is None:
        return None
    processor = load_processor(str(model_dir))
    ids = inputs["input_ids"][0].tolist()
    tokens = (getattr(processor, "image_token", None), getattr(processor, "video_token", None))
    placeholders = {processor.tokenizer.convert_tokens_to_ids(t) for t in tokens if t}
    return ProcessorCounts(len(ids), sum(1 for i in ids if i in placeholders))


def role_prompt_check(
    ran: Mapping[str, int], counts: ProcessorCounts, through_encoder: bool = False
) -> OracleResult:
    """Every engine role ran the prompt the model's processor builds: prefill and decode (or the
    encoder's embeddings and the processor) agree on the request's media tokens. Example:
    "prefill and decode disagree on the request's media tokens: prefill ran 65 (115 prompt
    tokens), decode 64 (114); the model's processor places 64 (114): the input of prefill
    diverged"."""
    if not ran:
        return OracleResult(True, "no engine role reported its prompt")
    each = ", ".join(
        f"{role} {counts.media_implied(n)} ({n} prompt tokens)" for role, n in ran.items()
    )
    off = sorted(role for role, n in ran.items() if n != counts.prompt)
    if not off:
        return OracleResult(True, f"every role ran the model's prompt ({each})")
    if len(set(ran.values())) > 1:
        lead = f"{' and '.join(ran)} disagree on the request's media tokens"
    elif through_encoder:
        lead = "the encoder's embeddings and the model's processor disagree on the media tokens"
    else:
        lead = "the roles' prompt differs from the model's"
    return OracleResult(
        False,
        f"{lead}: {each}; the model's processor places {counts.media} ({counts.prompt}): the "
        f"input of {', '.join(off)} diverged",
    )


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
        parts.append(f"first differing token #{diff[0]}: {diff[1]!r} where the model says "
                     f"{diff[2]!r}")  # fmt: skip
    if counts is not None and prompt_tokens is not None and counts.media:
        implied = counts.media_implied(prompt_tokens)
        verdict = "agree" if implied == counts.media else "disagree"
        parts.append(f"media tokens {verdict}: usage implies {implied}, the processor counts "
                     f"{counts.media}")  # fmt: skip
    if ran and counts is not None:
        shown = ", ".join(f"{role} {n}" for role, n in ran.items())
        parts.append(f"prompt tokens ran: {shown} (processor {counts.prompt})")
    return "; ".join(parts)
