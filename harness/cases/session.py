"""One call that runs serve cases for a test or a user, as the suite does: the launches they need
(one topology at a time, shared by the cases of one launch signature, each warmed up with the
media its cases send), the session's judging (the baseline answers of earlier launches, the
engines alone), and on the way out every topology stopped and verified gone (no process carries
its marker, no port it leased listens). A context manager, as vLLM's `RemoteOpenAIServer` is:

    with CaseSession(urls) as cases:
        record = cases.run(ServeCase(profile, profile.cases[0], "cpu"))
        print(record.checks)

The suite's own plugin builds the same parts from pytest's fixtures (harness/plugin/fixtures.py),
with every case of the session known up front."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.engine_first import EngineFirst
from harness.cases.loop import run_case
from harness.cases.pool import TopologyPool
from harness.core.paths import TOPOLOGY_ID_ENV
from harness.oracles.answer import JudgeSettings
from harness.oracles.baselines import BaselineStore
from harness.oracles.engine_alone import EngineAlone
from harness.oracles.judge import Judging
from harness.payloads.chat import MediaURLs, warmup_bodies
from harness.profiles import MediaKind
from harness.topology.processes import listening_ports, marked_processes


class LeftBehind(RuntimeError):
    """A topology's processes or ports outlived its stop: named, never ignored."""


def warmup_kinds(cases: Sequence[ServeCase]) -> tuple[dict[str, set[MediaKind]], set[str]]:
    """The media kinds each launch's cases send answered 200, and the launches whose cases send
    a request with no media: what each launch is warmed up with before its first case."""
    kinds: dict[str, set[MediaKind]] = {}
    texts: set[str] = set()
    for sc in cases:
        if not sc.signature:
            continue
        for request in sc.requests:
            expect = request.gpu if sc.tier == "gpu" else request.cpu
            if expect.status == 200:
                kinds.setdefault(sc.signature, set()).update(request.media)
                if not request.media:
                    texts.add(sc.signature)
    return kinds, texts


@dataclass
class CaseSession:
    """The cases run in one session (module doc). `engines`: the engines alone the answers are
    held to (None: a fresh set under the shared cache, stopped on exit; none where `settings`
    turn the engine alone off)."""

    urls: MediaURLs
    settings: JudgeSettings = field(default_factory=JudgeSettings)
    engines: EngineAlone | None = None
    baselines: BaselineStore = field(default_factory=BaselineStore)
    cases: list[ServeCase] = field(default_factory=list)  # what it will run, where known

    def __post_init__(self) -> None:
        self._own_engines = self.engines is None and self.settings.engine_alone
        if self._own_engines:
            self.engines = EngineAlone()
        self.kinds, self.texts = warmup_kinds(self.cases)
        first = None
        if self.engines is not None and self.settings.engine_alone:
            every_tier = self.settings.engine_alone_first
            first = EngineFirst(self.engines, self.urls, lambda: self.cases, every_tier)
        self.pool = TopologyPool(self.warmups, before_start=first)
        self.launched: list[Any] = []  # every plan it launched, verified on exit

    def warmups(self, signature: str) -> list[dict[str, Any]]:
        kinds = self.kinds.get(signature, set())
        text = signature in self.texts or not kinds
        return warmup_bodies(sorted(kinds), self.urls, text=text)

    @property
    def judging(self) -> Judging:
        return Judging(self.baselines, self.settings, self.engines)

    def run(self, sc: ServeCase, record: CaseRecord | None = None) -> CaseRecord:
        """Launch (or reuse) its topology, send and judge its requests: the case's record.
        Raises its TopologyFailure where it fails (the record passed in keeps what it did)."""
        kinds, texts = warmup_kinds([sc])
        for signature, found in kinds.items():
            self.kinds.setdefault(signature, set()).update(found)
        self.texts |= texts
        if sc not in self.cases:
            self.cases.append(sc)
        try:
            return run_case(sc, self.pool, self.urls, self.judging, record)
        finally:
            current = self.pool.current
            if current is not None and current.plan not in self.launched:
                self.launched.append(current.plan)

    def __enter__(self) -> CaseSession:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.pool.close()
        finally:
            if self._own_engines and self.engines is not None:
                self.engines.close()
        plans = [*self.launched, *(topo.plan for _, topo in self.pool.failed.values())]
        left = [
            f"topology {plan.topology_id}: {', '.join(found)}"
            for plan in plans
            if (found := left_by(plan.topology_id, list(plan.ports.values())))
        ]
        if left:  # a harness defect: it shows even over the failure that ended the session
            raise LeftBehind("; ".join(left))


def left_by(topology_id: str, ports: list[int]) -> list[str]:
    """What a stopped topology left: a process carrying its marker, a port it leased listening."""
    left = [f"pid {p.pid}" for p in marked_processes(TOPOLOGY_ID_ENV, topology_id)]
    left += [f"port {port} listening" for port in listening_ports(ports)]
    return left
