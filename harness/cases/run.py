"""TopologyPool: one topology serving cases at a time; cases that share a signature share it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.verdict import TopologyFailure
from harness.machine.ports import PortRegistry
from harness.profiles import CaseSpec, Profile, Tier
from harness.topology.plan import launch_signature
from harness.topology.topology import Topology, launch

WarmupsFor = Callable[[str], Sequence[dict[str, Any]]]
# How the pool gets a topology for a case: launch it (default), or attach to a deployed target.
Opener = Callable[[Profile, Tier, CaseSpec, Sequence[dict[str, Any]], PortRegistry], Topology[Any]]


class TopologyPool:
    """One topology serving cases (a 2-core box cannot run two). A launch failure is remembered
    per signature, so the other cases of that launch fail at once with the same cause."""

    def __init__(
        self,
        tier: Tier,
        warmups_for: WarmupsFor,
        registry: PortRegistry | None = None,
        opener: Opener = launch,
        say: Callable[[str], None] = lambda line: None,
    ):
        self.tier = tier
        self.warmups_for = warmups_for
        self.registry = registry or PortRegistry()
        self.opener = opener
        self.say = say  # progress lines (harness/cases/results.py, Progress)
        self.current: Topology[Any] | None = None
        self._held = contextlib.ExitStack()  # the current topology, entered; closing stops it
        # why each failed launch failed, and its topology (timeline and logs, for evidence)
        self.failed: dict[str, tuple[TopologyFailure, Topology[Any]]] = {}
        self.launched_here = False

    def get(self, profile: Profile, case: CaseSpec) -> Topology[Any]:
        signature = launch_signature(profile, self.tier, case)
        if signature in self.failed:
            raise self.failed[signature][0]
        self.launched_here = False
        if self.current is not None and self.current.plan.signature == signature:
            try:
                self.current.watch()
            except TopologyFailure as failure:
                self.discard(failure)
                raise
            return self.current
        self.close()
        topo = self.opener(profile, self.tier, case, self.warmups_for(signature), self.registry)
        args = " ".join(topo.plan.args) or "no launcher args"
        self.say(f"launching {profile.name} ({args})")
        topo.timeline.listeners.append(self._relay(profile.name))
        try:
            self._held.enter_context(topo)  # a failed start stops itself
        except TopologyFailure as failure:
            self.failed[signature] = (failure, topo)
            self.say(f"{profile.name} failed to start: {failure.cause.value}")
            raise
        self.say(f"{profile.name} ready in {topo.ready_s or 0:.1f} s")
        self.current = topo
        self.launched_here = True
        return topo

    def _relay(self, name: str) -> Callable[[dict[str, Any]], None]:
        return lambda e: self.say(f"  {name} +{e['t']:.1f} s {e['role']}: {e['state']}")

    def topology_for(self, profile: Profile, case: CaseSpec) -> Topology[Any] | None:
        """The live or failed topology this case ran (or tried to run) on."""
        signature = launch_signature(profile, self.tier, case)
        if self.current is not None and self.current.plan.signature == signature:
            return self.current
        failed = self.failed.get(signature)
        return failed[1] if failed else None

    def discard(self, failure: TopologyFailure) -> None:
        """The current topology broke mid-test: remember why, and take it down."""
        if self.current is not None:
            self.failed[self.current.plan.signature] = (failure, self.current)
            self.close()

    def close(self) -> None:
        """Stop the current topology (verified: a teardown failure is raised)."""
        topo, self.current = self.current, None
        started = time.monotonic()
        self._held.close()
        if topo is not None:
            self.say(f"{topo.plan.profile} torn down in {time.monotonic() - started:.1f} s")

    def __enter__(self) -> TopologyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
