"""Structural oracles on an OpenAI chat-completion response body."""

from __future__ import annotations

from typing import Any

from harness.judging.oracles.result import OracleResult, excerpt

DIFF_CONTEXT_CHARS = 40


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _first_choice(body: object) -> dict[str, Any] | None:
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _first_content(body: object) -> str | None:
    choice = _first_choice(body)
    message = choice.get("message") if choice else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def check_chat_structure(status: int, body: object) -> OracleResult:
    """A well-formed successful chat completion: status 200, a first choice with non-empty
    string ``message.content`` and a ``finish_reason``, and ``usage.prompt_tokens`` /
    ``usage.completion_tokens`` integers > 0. The detail lists every problem found.
    """
    problems: list[str] = []
    if status != 200:
        problems.append(f"status {status}, expected 200")
    if not isinstance(body, dict):
        problems.append(f"body is {type(body).__name__}, expected a JSON object")
        return OracleResult(False, "; ".join(problems))
    choice = _first_choice(body)
    finish_reason = choice.get("finish_reason") if choice else None
    if choice is None:
        problems.append("choices missing or empty")
    else:
        content = _first_content(body)
        if content is None:
            problems.append("choices[0].message.content missing or not a string")
        elif not content.strip():
            problems.append("choices[0].message.content is empty")
        if not finish_reason:
            problems.append("choices[0].finish_reason missing")
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    for field in ("prompt_tokens", "completion_tokens"):
        if not _is_count(usage.get(field)):
            problems.append(f"usage.{field} is {usage.get(field)!r}, expected an int > 0")
    if problems:
        return OracleResult(False, "; ".join(problems))
    return OracleResult(
        True,
        f"200, finish_reason {finish_reason!r}, "
        f"prompt_tokens {usage['prompt_tokens']}, completion_tokens {usage['completion_tokens']}",
    )


def check_prompt_tokens(body: object, expected: int) -> OracleResult:
    """``usage.prompt_tokens`` equals ``expected`` exactly (media token accounting)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    actual = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if actual == expected and not isinstance(actual, bool):
        return OracleResult(True, f"prompt_tokens {actual} == expected {expected}")
    return OracleResult(False, f"prompt_tokens {actual!r} != expected {expected}")


def first_difference(a: str, b: str) -> int | None:
    """Index of the first differing character, or None when equal.

    ``first_difference("abc", "abd") == 2``; ``first_difference("ab", "abc") == 2``.
    """
    for index, (char_a, char_b) in enumerate(zip(a, b, strict=False)):
        if char_a != char_b:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def check_same_text(body: object, baseline_body: object, label: str = "baseline") -> OracleResult:
    """The first choice's content equals the baseline's exactly (greedy decoding must match a
    single-instance baseline). On a mismatch the detail names the first differing character
    index and shows both texts from a little before it.
    """
    content = _first_content(body)
    baseline = _first_content(baseline_body)
    if content is None or baseline is None:
        which = "response" if content is None else label
        return OracleResult(False, f"{which} has no choices[0].message.content string")
    index = first_difference(content, baseline)
    if index is None:
        return OracleResult(True, f"identical content ({len(content)} chars)")
    start = max(index - DIFF_CONTEXT_CHARS, 0)
    return OracleResult(
        False,
        f"content differs from {label} at char {index} "
        f"(lengths {len(content)} vs {len(baseline)}); "
        f"from char {start}: got {excerpt(content[start:])}, {label} {excerpt(baseline[start:])}",
    )
