"""Where an answer's input departed from the model's: the processor's own counts, each role's
prompt against them, the first differing token (real tiny processors, no engine)."""

from __future__ import annotations

from harness.oracles.divergence import describe_divergence, first_token_difference
from harness.oracles.processor import (
    ProcessorCounts,
    load_processor,
    processor_counts,
    role_prompt_check,
)
from harness.payloads.chat import MediaURLs, chat_body
from harness.tiny_models import build_tiny_model


def test_the_processor_counts_llava_image_tokens_without_cls(urls: MediaURLs) -> None:
    """LLaVA-1.5's processor places (112/14)^2 = 64 image tokens for the tiny model, the count
    Dynamo 1.6.1's encode worker exceeds by one (its 65 rows keep CLS)."""
    body = chat_body("What colour is the square?", ["image_url"], 8, urls)
    counts = processor_counts(build_tiny_model("llava"), body["messages"], urls.fetch)
    assert counts is not None and counts.media == 64
    assert counts.media_implied(counts.prompt + 1) == 65


def test_role_prompts_name_the_role_that_diverged() -> None:
    counts = ProcessorCounts(prompt=114, media=64)
    held = role_prompt_check({"prefill": 114, "decode": 114}, counts)
    assert held.passed and "every role ran the model's prompt" in held.detail
    split = role_prompt_check({"prefill": 115, "decode": 114}, counts)
    assert not split.passed
    assert split.detail == (
        "prefill and decode disagree on the request's media tokens: prefill 65 (115 prompt "
        "tokens), decode 64 (114 prompt tokens); the model's processor places 64 (114): the "
        "input of prefill diverged"
    )
    alone = role_prompt_check({"pd": 115}, counts, through_encoder=True)
    assert alone.detail.startswith("the encoder's embeddings and the model's processor disagree")


def test_first_differing_token_and_the_whole_line(urls: MediaURLs) -> None:
    model_dir = build_tiny_model("qwen3_vl")
    tokenizer = load_processor(str(model_dir)).tokenizer
    want = tokenizer("red square", add_special_tokens=False)["input_ids"]
    assert first_token_difference(tokenizer, "red square", want) is None
    difference = first_token_difference(tokenizer, "red circle", want)
    assert difference is not None
    index, got, said = difference
    assert (got, said) != ("", "") and got != said and index >= 1
    line = describe_divergence(
        model_dir,
        "red circle",
        want,
        115,
        ProcessorCounts(114, 64),
        {"prefill": 115, "decode": 114},
    )
    assert line.startswith("differs from the model's own answer; first differing token #")
    assert "media tokens disagree: usage implies 65, the processor counts 64" in line
    assert line.endswith("prompt tokens ran: prefill 115, decode 114 (processor 114)")
