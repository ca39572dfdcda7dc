"""Which oracles judge each request of a case, by tier, before anything runs: the labels of the
same declared oracles the judge runs (oracle_set.py), for `harness list` and for the rule that
every 200 answer meets an oracle that reads its content. An oracle a declared upstream defect
says must fail is listed as such and does not vouch for the content."""

from __future__ import annotations

from dataclasses import dataclass

from harness.judging.answer import Scope
from harness.judging.oracle_set import applicable
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier

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
    defect = request.cpu.known_defect if tier == "cpu" else None
    labels, content = [], []
    for oracle in applicable(scope):
        declared = defect is not None and oracle.defect in defect.oracles
        label = oracle.label(scope) + (DECLARED if declared else "")
        labels.append(label)
        if oracle.reads_content and not declared:
            content.append(label)
    return RequestOracles(scope.expect_status, tuple(labels), tuple(content))


def case_oracles(case: CaseSpec, tier: Tier, profile: Profile) -> list[RequestOracles]:
    return [request_oracles(r, tier, profile) for r in (case, *case.follow_ups)]
