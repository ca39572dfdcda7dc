"""The judge: every registered oracle that applies (registry.py), in order, on each answer and
then on the case's answers together; the first that fails raises its named failure. A
request's declared upstream defect says how its oracles must come out (`held`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.oracles.answer import Answer, CaseRun, JudgeSettings, Scope
from harness.oracles.base import Flow, Oracle
from harness.oracles.baselines import BaselineStore
from harness.oracles.checks import OracleResult
from harness.oracles.engine_alone import EngineAlone
from harness.oracles.registry import applicable, applicable_to_case
from harness.profiles import Profile, RequestSpec, Tier

DETAIL_CHARS = 600  # of a held defect's detail in the results: the diagnosis and an excerpt
NO_LONGER_SHOWS = ": it no longer shows; remove the known_defect declaration"
UNREACHED = ": it did not show, and an earlier stage failed (not a reason to remove it)"


@dataclass(frozen=True)
class Judging:
    """What a session judges every case against: the answers of its earlier launches (baselines
    for the cross-topology and media-blind comparisons), its engines alone (None: none this
    session), and which optional oracles it runs."""

    baselines: BaselineStore
    settings: JudgeSettings = field(default_factory=JudgeSettings)
    engines: EngineAlone | None = None

    def failed(
        self,
        requests: Sequence[RequestSpec],
        tier: Tier,
        profile: Profile,
        test_id: str,
        cause: str,
    ) -> None:
        """A case that failed: later launches comparing with its answers say why they have none."""
        for request in requests:
            self.baselines.record_failure(Scope(request, tier, profile).key(), test_id, cause)


@dataclass
class CaseJudge:
    """Judges one case's answers on one launch (`signature`), then the case's answers together."""

    tier: Tier
    baselines: BaselineStore
    signature: str
    settings: JudgeSettings = field(default_factory=JudgeSettings)
    content_passed: int = 0  # oracles that read an answer's content and vouched for it
    # the last answer judged on the CPU tier with no numeric oracle that vouched, and why
    unjudged_numerically: str | None = None

    def judge(self, answer: Answer) -> list[str]:
        """Checks that held, one line each. Every oracle judges; where any fails, raises the
        failure earliest in the request's data flow (its shape, its path, the encoder's rows,
        its content, its numbers), naming every other one that failed too."""
        lines = []
        failed: list[tuple[Oracle, TopologyFailure]] = []
        self.record_baselines(answer)
        numeric: list[tuple[bool, str]] = []  # each numeric oracle: (vouched, its line)
        for oracle in applicable(answer.scope):
            result = oracle.check(answer)
            if "logprob_gap" in result.figures:
                answer.logprob_gap = result.figures["logprob_gap"]
            if "engine_gap" in result.figures:
                answer.engine_gap = result.figures["engine_gap"]
            try:
                lines.append(self.line_of(answer, oracle, result))
            except TopologyFailure as failure:
                failed.append((oracle, failure))
                continue
            if oracle.reads_content and result.passed and result.vouches:
                self.content_passed += 1
            if oracle.flow == Flow.NUMBERS:
                numeric.append((result.passed and result.vouches, lines[-1]))
        self.unjudged_numerically = None
        if self.tier == "cpu" and answer.resp.status_code == 200 and not any(v for v, _ in numeric):
            self.unjudged_numerically = (
                "; ".join(line for _, line in numeric) or "no numeric oracle applies"
            )
        if failed:
            raise self.verdict(answer, failed)
        return lines

    def record_baselines(self, answer: Answer) -> None:
        """CPU: this answer, and the other media's where it was sent, for the comparisons later
        launches of this session make (`same_as`, the media-blind diagnosis)."""
        if self.tier != "cpu":
            return
        encoded = answer.scope.through_encoder
        if answer.scope.expect_status == answer.resp.status_code == 200:
            self.baselines.record(answer.scope.key(), self.signature, answer.content, encoded)
        for oracle in applicable(answer.scope):
            for key, text in oracle.baselines(answer).items():
                self.baselines.record(key, self.signature, text, encoded)

    def verdict(
        self, answer: Answer, failed: list[tuple[Oracle, TopologyFailure]]
    ) -> TopologyFailure:
        """The first failure in data-flow order names the cause; the rest follow it. A declared
        defect that did not show says so, but never advises removing itself while an earlier
        stage (the path, the encoder's rows) failed: the request may not have reached it."""
        failed.sort(key=lambda pair: (pair[0].flow, pair[0].order))
        first_oracle, first = failed[0]
        structural = first_oracle.flow <= Flow.ENCODER
        others = []
        for oracle, failure in failed[1:]:
            text = failure.message
            if structural and text.endswith(NO_LONGER_SHOWS):
                text = text.removesuffix(NO_LONGER_SHOWS) + UNREACHED
            others.append(f"[{oracle.name}] {text}")
        message = first.message + (f"; also failing: {'; '.join(others)}" if others else "")
        primary = TopologyFailure(first.cause, message, first.evidence)
        return self.explained(primary, answer, first_oracle)

    def judge_case(self, run: CaseRun) -> list[str]:
        """The case oracles' lines, once every request of the case is answered; raises at the
        first that fails."""
        lines = []
        for oracle in applicable_to_case(run.scope):
            result = oracle.check(run)
            lines.append(self.must(result, cause=result.cause or oracle.cause))
        return lines

    def line_of(self, answer: Answer, oracle: Oracle, result: OracleResult) -> str:
        """The line of an oracle that held, where a request's declared defect says how it must
        come out. Raises where it did not: a failing oracle, or a declared defect that no longer
        shows (the defect is gone: remove the declaration)."""
        prefix = oracle.prefix
        defect = answer.request.cpu.defect_of(oracle.defect) if self.tier == "cpu" else None
        if defect is None:
            return self.must(result, prefix, result.cause or oracle.cause)
        if result.passed and not result.vouches:  # it compared nothing: the defect unjudged
            return f"{prefix}{result.detail} (upstream defect {defect.id} not judged here)"
        if not self.settings.excuse_defects:  # judged as if undeclared; a failure names it
            if result.passed:
                return prefix + result.detail
            raise fail(Cause.WRONG_ANSWER, f"{prefix}{result.detail} [{defect.describe()}]")
        if result.passed:
            raise fail(
                Cause.WRONG_ANSWER,
                f"{prefix}{result.detail}, but the profile declares upstream defect {defect.id} "
                f"here ({oracle.defect} must fail while it shows){NO_LONGER_SHOWS}",
            )
        return f"{prefix}upstream defect {defect.id} holds: {result.detail[:DETAIL_CHARS]}"

    @staticmethod
    def must(result: OracleResult, prefix: str = "", cause: Cause = Cause.WRONG_ANSWER) -> str:
        if not result.passed:
            raise fail(cause, prefix + result.detail, result.role)
        return prefix + result.detail

    def explained(
        self, failure: TopologyFailure, answer: Answer, oracle: Oracle
    ) -> TopologyFailure:
        """The failure with what the other oracles know of it (`Oracle.explains`): e.g. the
        other media answering alike through an encode worker shows as "the encode worker's
        answers do not depend on the image while the aggregated path's do", not as a bare
        wrong_answer."""
        said = [
            why
            for other in applicable(answer.scope)
            if (why := other.explains(oracle, failure, answer))
        ]
        if not said:
            return failure
        message = "; ".join([failure.message, *said])
        return TopologyFailure(failure.cause, message, failure.evidence)


def fail(cause: Cause, message: str, role: str | None = None) -> TopologyFailure:
    return TopologyFailure(cause, message, Evidence(phase="request", role=role))
