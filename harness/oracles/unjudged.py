"""What a Dynamo checkout's payload asks of a request that the harness does not judge
(`RequestSpec.unjudged`, profiles/checkout_case.py): said in the result, with why, so a
checkout's check is never passed over in silence."""

from __future__ import annotations

from harness.oracles.answer import Answer, Scope
from harness.oracles.base import Oracle
from harness.oracles.checks import OracleResult


class NotJudgedHere(Oracle):
    name = "the checkout's checks not judged here"
    order = 99

    def applies(self, scope: Scope) -> bool:
        return bool(scope.request.unjudged)

    def label(self, scope: Scope) -> str:
        return f"the checkout asks {len(scope.request.unjudged)} check(s) not judged here"

    def check(self, answer: Answer) -> OracleResult:
        return OracleResult(
            True, "not judged: " + "; ".join(answer.request.unjudged), vouches=False
        )
