"""The logprobs oracle's pure comparison, against hand-computed tables."""

from __future__ import annotations

from harness.oracles.checks import Step, compare_logprobs, engine_steps

MODEL = [
    Step("a", -0.5, {"a": -0.5, "b": -1.0, "c": -3.0}),
    Step("b", -0.2, {"b": -0.2, "c": -2.0, "d": -2.0001}),
]


def test_equal_within_the_tolerance_passes_with_its_largest_gap() -> None:
    engine = [
        Step("a", -0.5004, {"a": -0.5004, "b": -1.0, "c": -3.0}),
        Step("b", -0.2, {"b": -0.2, "c": -2.0, "e": -2.0002}),  # d/e tie with the k-th: either
    ]
    verdict = compare_logprobs(engine, MODEL, 1e-3)
    assert verdict.result.passed, verdict.result.detail
    assert abs((verdict.gap or 0) - 4e-4) < 1e-9
    assert "2 tokens, largest |gap| 4.00e-04" in verdict.result.detail


def test_a_chosen_logprob_off_by_more_than_the_tolerance_names_the_token() -> None:
    engine = [Step("a", -0.502, {"a": -0.502, "b": -1.0, "c": -3.0}), MODEL[1]]
    verdict = compare_logprobs(engine, MODEL, 1e-3)
    assert not verdict.result.passed
    assert "token 0 'a': logprob -0.502000, the model's -0.500000 (|gap| 2.00e-03" in (
        verdict.result.detail
    )


def test_the_first_diverging_token_is_named_with_both_logprobs() -> None:
    engine = [Step("b", -0.9, {"b": -0.9, "a": -1.1, "c": -3.0}), MODEL[1]]
    verdict = compare_logprobs(engine, MODEL, 1e-3)
    assert not verdict.result.passed
    detail = verdict.result.detail
    assert "token 0: the answer chose 'b' (logprob -0.900000), the model chose 'a'" in detail
    assert "the answer's token has logprob -1.000000 there" in detail


def test_a_top_k_token_clear_of_the_kth_must_be_on_both_sides() -> None:
    engine = [Step("a", -0.5, {"a": -0.5, "x": -1.0, "c": -3.0}), MODEL[1]]
    verdict = compare_logprobs(engine, MODEL, 1e-3)
    assert not verdict.result.passed
    assert "the model's ['b'] missing from the answer's, the answer's ['x'] not in" in (
        verdict.result.detail
    )


def test_engine_steps_read_openai_logprobs_and_say_when_absent() -> None:
    data = {
        "choices": [
            {
                "logprobs": {
                    "content": [
                        {
                            "token": "a",
                            "logprob": -0.5,
                            "top_logprobs": [{"token": "a", "logprob": -0.5}],
                        }
                    ]
                }
            }
        ]
    }
    assert engine_steps(data) == [Step("a", -0.5, {"a": -0.5})]
    assert engine_steps({"choices": [{"message": {"content": "a"}}]}) is None
