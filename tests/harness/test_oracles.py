from typing import Any

import pytest

from harness.oracles.checks import (
    KeywordOracle,
    OracleResult,
    check_chat_structure,
    check_prompt_tokens,
    check_same_text,
    first_difference,
)


def chat_body(content: Any = "A green square.", **usage: Any) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 5, **usage},
    }


@pytest.mark.parametrize(
    "text", ["Green.", "GREEN", "a green-ish square", "(green)", "it is\ngreen"]
)
def test_keyword_matches_whole_word_case_insensitively(text: str) -> None:
    assert KeywordOracle(all_of=["green"]).check(text).passed


@pytest.mark.parametrize("text", ["greenish", "evergreen", "greens", "green_square", "gr een"])
def test_keyword_rejects_partial_words(text: str) -> None:
    result = KeywordOracle(all_of=["green"]).check(text)
    assert not result.passed
    assert "missing all-of word 'green'" in result.detail
    assert repr(text) in result.detail


def test_all_of_needs_every_word_and_names_the_missing_one() -> None:
    oracle = KeywordOracle(all_of=["green", "square"])
    assert oracle.check("A green square").passed
    result = oracle.check("A green circle")
    assert not result.passed
    assert "'square'" in result.detail
    assert "'green'" not in result.detail.split(";")[0]


def test_any_of_needs_one_word() -> None:
    oracle = KeywordOracle(any_of=["triangle", "triangles"])
    passed = oracle.check("Two Triangles!")
    assert passed == OracleResult(True, "found 'triangles'")
    failed = oracle.check("a circle")
    assert not failed.passed
    assert "none of the any-of words ['triangle', 'triangles']" in failed.detail


def test_all_of_and_any_of_combine() -> None:
    oracle = KeywordOracle(all_of=["yellow"], any_of=["triangle", "pyramid"])
    assert oracle.check("a yellow triangle").passed
    assert not oracle.check("a triangle").passed
    assert not oracle.check("a yellow square").passed


def test_multi_word_keyword_spans_whitespace() -> None:
    oracle = KeywordOracle(all_of=["yellow triangle"])
    assert oracle.check("A Yellow\n  triangle moves").passed
    assert not oracle.check("a yellow, triangle").passed


def test_regex_characters_are_literal() -> None:
    assert KeywordOracle(all_of=["c++"]).check("I like C++ a lot").passed
    assert not KeywordOracle(all_of=["a.c"]).check("abc").passed


def test_detail_truncates_long_text() -> None:
    result = KeywordOracle(all_of=["green"]).check("blue " * 200)
    assert not result.passed
    assert len(result.detail) < 250
    assert result.detail.endswith("…'")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ValueError),
        ({"all_of": [], "any_of": []}, ValueError),
        ({"any_of": ["  "]}, ValueError),
        ({"all_of": "green"}, TypeError),
    ],
)
def test_oracle_that_cannot_fail_is_rejected(kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        KeywordOracle(**kwargs)


def test_chat_structure_passes_well_formed_response() -> None:
    result = check_chat_structure(200, chat_body())
    assert result.passed, result.detail
    assert "prompt_tokens 120" in result.detail


@pytest.mark.parametrize(
    ("status", "body", "expected_problem"),
    [
        (500, chat_body(), "status 500"),
        (
            200,
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
            "choices missing or empty",
        ),
        (200, chat_body(content=None), "content missing or not a string"),
        (200, chat_body(content="  "), "content is empty"),
        (200, chat_body(prompt_tokens=0), "usage.prompt_tokens is 0"),
        (200, chat_body(completion_tokens=True), "usage.completion_tokens is True"),
        (200, chat_body(completion_tokens="5"), "usage.completion_tokens is '5'"),
        (200, ["not", "a", "dict"], "body is list"),
    ],
)
def test_chat_structure_names_each_problem(status: int, body: Any, expected_problem: str) -> None:
    result = check_chat_structure(status, body)
    assert not result.passed
    assert expected_problem in result.detail


def test_chat_structure_requires_finish_reason_and_usage() -> None:
    body = chat_body()
    del body["choices"][0]["finish_reason"]
    del body["usage"]
    result = check_chat_structure(200, body)
    assert not result.passed
    assert "finish_reason missing" in result.detail
    assert "usage.prompt_tokens is None" in result.detail
    assert "usage.completion_tokens is None" in result.detail


def test_prompt_tokens_exact() -> None:
    assert check_prompt_tokens(chat_body(), 120).passed
    result = check_prompt_tokens(chat_body(), 121)
    assert not result.passed
    assert "120" in result.detail and "121" in result.detail
    assert not check_prompt_tokens({}, 120).passed


def test_same_tokens_equal_and_different() -> None:
    assert check_same_text(chat_body("same text"), chat_body("same text")).passed
    result = check_same_text(chat_body("The square is green."), chat_body("The square is red."))
    assert not result.passed
    assert "at char 14" in result.detail
    assert "got 'The square is green.'" in result.detail
    assert "baseline 'The square is red.'" in result.detail


def test_same_tokens_detail_starts_near_a_late_difference() -> None:
    prefix = "x" * 500
    result = check_same_text(chat_body(prefix + "green"), chat_body(prefix + "red"))
    assert "at char 500" in result.detail
    assert "from char 460:" in result.detail
    assert "x" * 100 not in result.detail


def test_same_tokens_prefix_and_missing_content() -> None:
    result = check_same_text(chat_body("abc"), chat_body("abcdef"))
    assert not result.passed
    assert "at char 3" in result.detail
    missing = check_same_text({"choices": []}, chat_body())
    assert not missing.passed
    assert "response has no" in missing.detail


def test_first_difference() -> None:
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") == 2
    assert first_difference("ab", "abc") == 2
    assert first_difference("", "x") == 0


@pytest.mark.parametrize(
    ("text", "passes"),
    [
        ("It is not green.", False),
        ("No green here", False),
        ("it isn't green", False),
        ("Neither green nor blue", False),
        ("Green, not red.", True),
        ("Not red. Green.", True),
        ("The square is green.", True),
    ],
)
def test_a_denied_keyword_does_not_count(text: str, passes: bool) -> None:
    assert KeywordOracle(any_of=["green"]).check(text).passed is passes
    assert KeywordOracle(all_of=["green"]).check(text).passed is passes
