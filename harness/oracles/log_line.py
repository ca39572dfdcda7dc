"""A line a role logs while the request is served (upstream's `expected_log`: the uuid
pass-through's "Dynamo multimodal embedding cache hit: identifier='…'")."""

from __future__ import annotations

from harness.core.verdict import Cause
from harness.oracles.answer import Answer, Scope
from harness.oracles.base import Answered, Flow
from harness.oracles.checks import OracleResult


class LogLine(Answered):
    name = "log line"
    order = 25
    flow = Flow.PATH  # where the request went inside its role (a cache), before its content
    cause = Cause.CACHE_MISS

    def applies(self, scope: Scope) -> bool:
        return super().applies(scope) and scope.request.log_line is not None

    def label(self, scope: Scope) -> str:
        return f"a role logs {scope.request.log_line!r} while it is served"

    def check(self, answer: Answer) -> OracleResult:
        line = answer.request.log_line
        assert line is not None
        found = [role for role, text in answer.logged.items() if line in text]
        if found:
            return OracleResult(True, f"{found[0]} logged {line!r} while serving it")
        grew = ", ".join(f"{role} +{len(text)} chars" for role, text in answer.logged.items())
        return OracleResult(
            False, f"no role logged {line!r} while serving it ({grew or 'no role log grew'})"
        )
