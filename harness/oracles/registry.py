"""The registry read as a whole: the answer oracles and case oracles that judge a request or a case
(registered by the modules of this package: base.py says how), and what `harness list` prints of
them, so what `list` prints is what runs (tests/harness/test_oracle_set.py)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.oracles.answer import CaseScope, Scope
from harness.oracles.base import CaseOracle, Oracle
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier


def applicable(scope: Scope) -> list[Oracle]:
    """The answer oracles that judge this request, in order."""
    return [oracle for oracle in Oracle.every() if oracle.applies(scope)]


def applicable_to_case(scope: CaseScope) -> list[CaseOracle]:
    """The case oracles that judge this case's requests together, in order."""
    return [oracle for oracle in CaseOracle.every() if oracle.applies(scope)]


DECLARED = " (fails: declared upstream defect)"


@dataclass(frozen=True)
class RequestOracles:
    status: int
    labels: tuple[str, ...]  # every oracle that judges it, in order
    content: tuple[str, ...]  # those of them that read the answer's content and may vouch

    def describe(self) -> str:
        return ", ".join(self.labels)


def request_oracles(request: RequestSpec, tier: Tier, profile: Profile) -> RequestOracles:
    scope = Scope(request, tier, profile)
    labels, content = [], []
    for oracle in applicable(scope):
        declared = tier == "cpu" and request.cpu.defect_of(oracle.defect) is not None
        label = oracle.label(scope) + (DECLARED if declared else "")
        labels.append(label)
        if oracle.reads_content and not declared:
            content.append(label)
    return RequestOracles(scope.expect_status, tuple(labels), tuple(content))


def case_oracles(case: CaseSpec, tier: Tier, profile: Profile) -> list[RequestOracles]:
    return [request_oracles(r, tier, profile) for r in (case, *case.follow_ups)]


def case_checks(case: CaseSpec, tier: Tier, profile: Profile) -> tuple[str, ...]:
    """The labels of the case oracles that judge the case once its requests are answered."""
    scope = CaseScope(case, tier, profile)
    return tuple(oracle.label(scope) for oracle in applicable_to_case(scope))
