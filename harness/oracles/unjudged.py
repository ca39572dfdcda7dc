"""What a Dynamo checkout's payloads ask of a case's requests that the harness does not judge
(`RequestSpec.unjudged`, profiles/checkout_case.py): said once in the case's result, with why,
so a checkout's check is never passed over in silence."""

from __future__ import annotations

from harness.oracles.answer import CaseRun, CaseScope
from harness.oracles.base import CaseOracle
from harness.oracles.checks import OracleResult


def unjudged(scope: CaseScope) -> list[str]:
    """Each check the case's requests ask and the harness does not judge, once."""
    requests = (scope.case, *scope.case.follow_ups)
    return list(dict.fromkeys(text for request in requests for text in request.unjudged))


class NotJudgedHere(CaseOracle):
    name = "the checkout's checks not judged here"
    order = 99

    def applies(self, scope: CaseScope) -> bool:
        return bool(unjudged(scope))

    def label(self, scope: CaseScope) -> str:
        return f"the checkout asks {len(unjudged(scope))} check(s) not judged here"

    def check(self, run: CaseRun) -> OracleResult:
        return OracleResult(True, "not judged: " + "; ".join(unjudged(run.scope)), vouches=False)
