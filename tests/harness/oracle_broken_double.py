"""A test double, loaded as a pytest plugin (`-p tests.harness.oracle_broken_double`): the
prompt-token oracle broken on purpose, passing every answer, so that `mutate`'s self-test can
watch the fault only it catches escape (tests/harness/test_mutate.py)."""

from __future__ import annotations

from harness.oracles.answer_shape import PromptTokens
from harness.oracles.checks import OracleResult


def _passes_everything(self: PromptTokens, answer: object) -> OracleResult:
    return OracleResult(True, "prompt tokens: not compared (broken on purpose)")


PromptTokens.check = _passes_everything  # type: ignore[method-assign]
