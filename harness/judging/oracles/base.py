"""What an oracle is, as a declared value (testcontainers' wait strategies, xdist's scheduler
protocol): when it applies, whether it reads the answer's content, its check and the cause it
fails with. The judge, the serve case and `harness list` loop over the same list
(harness/judging/oracle_set.py), so what `list` prints is what runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from harness.core.verdict import Cause

if TYPE_CHECKING:
    from harness.judging.answer import Answer, Scope
    from harness.judging.oracles.result import OracleResult


class Oracle:
    """One check of one answer. Subclasses set `name` and implement `applies` and `check`."""

    name: ClassVar[str]  # as `harness list` prints it (see `label`)
    reads_content: ClassVar[bool] = False  # vouches for what the answer says, not its shape
    # the name a profile's `known_defect.oracles` declares it under, if it may be declared
    defect: ClassVar[str | None] = None
    cause: ClassVar[Cause] = Cause.WRONG_ANSWER
    prefix: ClassVar[str] = ""  # its result lines start with this

    def applies(self, scope: Scope) -> bool:
        raise NotImplementedError

    def label(self, scope: Scope) -> str:
        return self.name

    def check(self, answer: Answer) -> OracleResult:
        raise NotImplementedError

    def failure_cause(self, answer: Answer) -> Cause:
        return self.cause
