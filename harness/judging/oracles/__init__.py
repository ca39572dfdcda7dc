"""Pure checks of a chat response: keywords in the text, response structure, token equality."""

from harness.judging.oracles.keywords import KeywordOracle
from harness.judging.oracles.result import OracleResult
from harness.judging.oracles.structure import (
    check_chat_structure,
    check_prompt_tokens,
    check_same_text,
)

__all__ = [
    "KeywordOracle",
    "OracleResult",
    "check_chat_structure",
    "check_prompt_tokens",
    "check_same_text",
]
