"""Which roles served a request: each role's own request counter, settled, against the roles its
topology and media say must (serving.py)."""

from __future__ import annotations

from harness.core.verdict import Cause
from harness.oracles.answer import Answer
from harness.oracles.base import Answered, Flow
from harness.oracles.checks import (
    OracleResult,
)


class RolesServed(Answered):
    """The roles that served the request are the ones its topology and media say must
    (serving.py; each role's own request counter, settled before judging)."""

    name = "path"
    order = 90
    cause = Cause.WRONG_PATH
    flow = Flow.PATH

    def check(self, answer: Answer) -> OracleResult:
        if answer.path is None:
            return OracleResult(True, "path not observed (no counters)", vouches=False)
        return answer.path
