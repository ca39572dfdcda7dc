"""The CPU tier's independent reference: the model's own answer, Hugging Face transformers
`generate` on the same tiny checkpoint and the raw media, greedy, with the model's own chat
template, processor, feature layer and feature selection (processor.py), and each token's top
log-probabilities as vLLM returns them (`steps_of`). Nothing in it follows the code under test: a
topology whose answers agree with each other but not with the model itself disagrees with it. Every
request is compared with it whatever path its media travels; a path that computes something else
shows as a declared upstream defect (profiles' `known_defect`,
docs/explanation/upstream-defects.md)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.oracles.checks import Step
from harness.oracles.media_mirror import VLLM, MediaFetcher
from harness.oracles.processor import load_processor, processor_inputs

if TYPE_CHECKING:
    import torch


# How many alternatives each generated token's log-probability comes with, on both sides: as
# vLLM's own model tests compare an engine with transformers (check_logprobs_close, 5 there too).
TOP_LOGPROBS = 5


@dataclass(frozen=True)
class Reference:
    """The model's own greedy answer: its token ids and, per token, the raw (unprocessed)
    log-probabilities, as vLLM returns them (its default logprobs mode, raw_logprobs)."""

    ids: list[int]
    steps: list[Step]


@lru_cache(maxsize=4)
def load_model(model_dir: str, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return model.eval()


def reference_answer(
    model_dir: Path | str, body: dict[str, Any], media: MediaFetcher, dtype: str
) -> str | None:
    """The greedy answer to an OpenAI chat `body` (its messages and max_tokens), as text.
    None where processor_inputs cannot mirror vLLM's preprocessing."""
    ids = reference_token_ids(model_dir, body, media, dtype)
    if ids is None:
        return None
    return str(load_processor(str(model_dir)).tokenizer.decode(ids, skip_special_tokens=True))


def reference_token_ids(
    model_dir: Path | str, body: dict[str, Any], media: MediaFetcher, dtype: str
) -> list[int] | None:
    """The model's own greedy answer as token ids (see reference_answer)."""
    found = reference(model_dir, body, media, dtype)
    return None if found is None else found.ids


def reference(
    model_dir: Path | str,
    body: dict[str, Any],
    media: MediaFetcher,
    dtype: str,
    stack: str = VLLM,
) -> Reference | None:
    """One greedy `generate` on the raw media: the answer's ids and each token's top
    TOP_LOGPROBS log-probabilities. None where processor_inputs cannot mirror the engine's."""
    import torch

    inputs = processor_inputs(model_dir, body["messages"], media, stack)
    if inputs is None:
        return None
    model = load_model(str(model_dir), dtype)
    inputs = {
        k: v.to(getattr(torch, dtype)) if torch.is_floating_point(v) else v
        for k, v in inputs.items()
    }
    with torch.inference_mode():
        out = model.generate(
            **inputs,
            max_new_tokens=body["max_tokens"],
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    ids = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
    return Reference(ids, steps_of(ids, list(out.logits), str(model_dir)))


def steps_of(tokens: list[int], logits: list[torch.Tensor], model_dir: str) -> list[Step]:
    """Each generated token with its raw log-probability and top-k, as vLLM returns them."""
    import torch

    tokenizer = load_processor(model_dir).tokenizer

    def text(token: int) -> str:  # as vLLM renders a logprob's token: special ones as ''
        return str(tokenizer.decode([token], skip_special_tokens=True))

    steps = []
    for token, row in zip(tokens, logits, strict=True):
        logprobs = torch.log_softmax(row.float().reshape(-1), dim=-1)
        top = torch.topk(logprobs, TOP_LOGPROBS)
        steps.append(
            Step(
                text(token),
                float(logprobs[token]),
                {text(int(t)): float(v) for v, t in zip(top.values, top.indices, strict=True)},
            )
        )
    return steps
