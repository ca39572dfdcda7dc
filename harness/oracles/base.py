"""The oracles' base classes and the order of the data flow they look at: an `Oracle` judges one
answer, a `CaseOracle` a case's answers together, `Answered` a 200 answer. A concrete class (one
that sets `name`) registers itself; every module of this package is imported before the registry
is read (registry.py), so a new oracle is one new file here."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar

from harness.core.registered import Registered
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import Answer, BusySends, CaseRun, CaseScope, Scope
from harness.oracles.baselines import Key
from harness.oracles.checks import (
    OracleResult,
)
from harness.payloads.chat import MediaURLs


class Flow(IntEnum):
    """Where in a request's data flow an oracle looks, in the order the data goes: the answer's
    shape, the path the request took, what the encoder made of the media, the answer's content,
    its numbers. Where several fail, the earliest names the cause."""

    SHAPE = 0
    PATH = 1
    ENCODER = 2
    CONTENT = 3
    NUMBERS = 4


class Oracle(Registered, root=True):
    """One check of one answer. Subclasses set `name` and `order` and implement `applies` and
    `check`."""

    package = "harness.oracles"
    reads_content: ClassVar[bool] = False  # vouches for what the answer says, not its shape
    # the name a profile's `known_defect.oracles` declares it under, if it may be declared
    defect: ClassVar[str | None] = None
    cause: ClassVar[Cause] = Cause.WRONG_ANSWER
    prefix: ClassVar[str] = ""  # its result lines start with this
    # Where in the request's data flow it looks: the answer's shape, the path the request took,
    # what the encoder made of the media, the answer's content, its numbers. Where several fail,
    # the earliest names the cause (a wrong path explains a wrong number, not the reverse).
    flow: ClassVar[Flow] = Flow.CONTENT

    def applies(self, scope: Scope) -> bool:
        raise NotImplementedError

    def label(self, scope: Scope) -> str:
        return self.name

    def sends(self, scope: Scope, urls: MediaURLs) -> dict[str, dict[str, Any]]:
        """Requests it needs answered on the same launch to judge an answer, by name: the case
        loop sends them before judging and the answer carries their responses (`sent`)."""
        return {}

    def check(self, answer: Answer) -> OracleResult:
        """The verdict; a failure that is not the oracle's own `cause` names its own."""
        raise NotImplementedError

    def baselines(self, answer: Answer) -> dict[Key, str]:
        """The answers to what it sent that later launches of the session compare with, by
        baseline key (the judge records them; `sends` sent them)."""
        return {}

    def explains(self, failed: Oracle, failure: TopologyFailure, answer: Answer) -> str | None:
        """What this oracle knows of another one's failure on the same answer (the judge
        appends it to the message), or None."""
        return None


class CaseOracle(Registered, root=True):
    """One check of a case's answered requests together. Subclasses set `name` and `order` and
    implement `applies` and `check`."""

    package = "harness.oracles"
    cause: ClassVar[Cause] = Cause.WRONG_ANSWER

    def applies(self, scope: CaseScope) -> bool:
        raise NotImplementedError

    def label(self, scope: CaseScope) -> str:
        return self.name

    def sends_while_busy(self, scope: CaseScope) -> BusySends | None:
        """Requests the case loop sends after the case's own, while one worker holds a long one
        (their statuses and the counters after them are on the run it judges)."""
        return None

    def check(self, run: CaseRun) -> OracleResult:
        """The verdict; a failure that is not the oracle's own `cause` names its own."""
        raise NotImplementedError


SHORT = 40  # characters of an answer quoted inside a diagnosis


class Answered(Oracle):
    """An oracle of a 200 answer (a refusal's content is not judged)."""

    tier: str | None = None  # the tier it belongs to; None: both

    def applies(self, scope: Scope) -> bool:
        return scope.expect_status == 200 and self.tier in (None, scope.tier)
