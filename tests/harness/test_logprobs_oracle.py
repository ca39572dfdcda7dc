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


def test_a_gap_the_float32_reference_made_is_judged_against_float64() -> None:
    """The engine is nearer the model's float64 answer than the model's float32 answer is
    (measured: Qwen2.5-VL, a 324-token image, token 0: engine -0.983377, float32 -0.983739,
    float64 -0.983316): it passes, saying so; a gap the float64 answer confirms still fails."""
    from harness.oracles.checks import rejudged_in_float64

    model32 = [Step("n", -0.983739, {"n": -0.983739}), Step("o", -0.2, {"o": -0.2})]
    model64 = [Step("n", -0.983316, {"n": -0.983316}), Step("o", -0.2, {"o": -0.2})]
    engine = [Step("n", -0.983377, {"n": -0.983377}), Step("o", -0.2, {"o": -0.2})]
    first = compare_logprobs(engine, model32, 3e-4)
    assert not first.result.passed
    again = rejudged_in_float64(engine, model32, model64, 3e-4, first)
    assert again.result.passed and "against the model's float64 answer" in again.result.detail
    assert "4.23e-04 from that at token 0" in again.result.detail
    assert again.gap is not None and abs(again.gap - 6.1e-5) < 1e-9
    off = [Step("n", -0.9850, {"n": -0.9850}), Step("o", -0.2, {"o": -0.2})]
    first = compare_logprobs(off, model32, 3e-4)
    assert not rejudged_in_float64(off, model32, model64, 3e-4, first).result.passed
    assert rejudged_in_float64(engine, model32, None, 3e-4, first) is first
    near = [Step("n", -0.983700, {"n": -0.983700}), Step("o", -0.2, {"o": -0.2})]  # 32 ~ 64
    close = compare_logprobs(off, near, 3e-4)
    assert rejudged_in_float64(off, near, near, 3e-4, close) is close


def test_a_near_tie_flipped_by_the_precision_holds_and_stops_the_comparison() -> None:
    """bfloat16 (core/precision.py): where the model's own two choices are within the tolerance,
    the engine may take the other; nothing after is compared (the prefixes differ)."""
    engine = [Step("b", -0.8, {"b": -0.8, "a": -0.9, "c": -3.0}), Step("z", -9.0, {"z": -9.0})]
    tied = compare_logprobs(engine, MODEL, 0.6, near_ties=True)
    assert tied.result.passed and tied.tie_at == 0, tied.result.detail
    assert "the answer chose 'b', the model 'a', 0.500 apart" in tied.result.detail
    assert not compare_logprobs(engine, MODEL, 0.4, near_ties=True).result.passed  # not a tie
    assert not compare_logprobs(engine, MODEL, 0.6).result.passed  # float32 allows none


def test_a_token_outside_the_models_top_k_is_never_a_near_tie() -> None:
    engine = [Step("q", -0.6, {"q": -0.6, "a": -0.7}), MODEL[1]]
    assert not compare_logprobs(engine, MODEL, 5.0, near_ties=True).result.passed
