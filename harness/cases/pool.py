"""One topology serving cases at a time (a 2-core box cannot run two): cases that share a launch
signature share it, and a failed launch fails the rest of its cases at once with the same cause."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.cases.progress_lines import AFTER_CASE
from harness.core.precision import family_dtype
from harness.core.verdict import TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.machine.port_registry import PortRegistry
from harness.topology.log_tail import LOG_SCAN_BYTES
from harness.topology.topology import Topology, launch
from harness.topology.transient import MAX_RETRIES, TRANSIENT_STARTS, TransientStart, transient

# A health state the timeline records under a diagnosis's name, as a person reads it while the
# topology is still coming up (it is a verdict only if the phase fails on it).
STATE_WORDS = {
    "no_health_source": "notready, every endpoint ready (no health source yet?)",
    "no_health_server": "started with no system port: /health cannot be polled",
}


def logs_of(topo: Topology[Any]) -> str:
    """The end of every log a launch wrote (its roles' and its launcher's): where a transient
    start-up failure shows."""
    texts = []
    for path in sorted(topo.plan.log_dir.glob("*.log")):
        with contextlib.suppress(OSError):
            texts.append(path.read_bytes()[-LOG_SCAN_BYTES:].decode(errors="replace"))
    return "\n".join(texts)


def serving(spec: LaunchSpec) -> str:
    """What a launch serves, as its progress line says: the GPU model, or on the CPU tier the
    tiny checkpoint of its architecture standing in for it."""
    if spec.tier == "cpu":
        dtype = family_dtype(spec.model.cpu)
        return f"the tiny {spec.model.cpu} checkpoint in {dtype} as {spec.model.gpu}"
    return f"{spec.model.gpu} on the {spec.tier} tier"


WarmupsFor = Callable[[str], Sequence[dict[str, Any]]]


# How the pool gets a topology for a case: launch it (default), or attach to a deployed target.
Opener = Callable[[LaunchSpec, Sequence[dict[str, Any]], PortRegistry], Topology[Any]]
# What runs once a launch is resolved and its leases held, before its first process starts (the
# engine alone's answers where the topology will hold the device: cases/engine_first.py).
BeforeStart = Callable[[LaunchSpec, Topology[Any]], None]


class TopologyPool:
    """One topology serving cases (a 2-core box cannot run two). A launch failure is remembered
    per signature, so the other cases of that launch fail at once with the same cause."""

    def __init__(
        self,
        warmups_for: WarmupsFor,
        registry: PortRegistry | None = None,
        opener: Opener = launch,
        say: Callable[[str], None] = lambda line: None,
        transients: Sequence[TransientStart] = TRANSIENT_STARTS,
        before_start: BeforeStart | None = None,
    ):
        self.warmups_for = warmups_for
        self.registry = registry or PortRegistry()
        self.opener = opener
        self.say = say  # progress lines (harness/cases/progress_lines.py)
        self.current: Topology[Any] | None = None
        self._held = contextlib.ExitStack()  # the current topology, entered; closing stops it
        # why each failed launch failed, and its topology (timeline and logs, for evidence)
        self.failed: dict[str, tuple[TopologyFailure, Topology[Any]]] = {}
        # the start-up failures each launch was started again after (topology/transient.py)
        self.transients = transients
        self.retries: dict[str, list[str]] = {}
        self.launched_here = False
        self.before_start = before_start

    def get(self, spec: LaunchSpec) -> Topology[Any]:
        signature = spec.signature
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
        for attempt in range(1, MAX_RETRIES + 2):
            topo = self.opener(spec, self.warmups_for(signature), self.registry)
            args = " ".join(topo.plan.args) or "no launcher args"
            self.say(f"launching {spec.name}, {serving(spec)} ({args})")
            topo.timeline.listeners.append(self._relay(spec.name))
            try:
                if self.before_start is not None and attempt == 1:
                    self.started_before(spec, topo)
                self._held.enter_context(topo)  # a failed start stops itself
                break
            except TopologyFailure as failure:
                known = transient(failure, logs_of(topo), spec.tier, self.transients)
                if known is None or attempt > MAX_RETRIES:
                    self.failed[signature] = (failure, topo)
                    self.say(f"{spec.name} failed to start: {failure.cause.value}")
                    raise
                why = (
                    f"start {attempt} failed {failure.cause.value} ({failure.message[:160]}): "
                    f"a known transient start-up failure ({known.describe()}; {known.source}), "
                    "started again"
                )
                self.retries.setdefault(signature, []).append(why)
                self.say(f"{spec.name}: {why}")
        self.say(f"{spec.name} ready in {topo.ready_s or 0:.1f} s")
        self.current = topo
        self.launched_here = True
        return topo

    def started_before(self, spec: LaunchSpec, topo: Topology[Any]) -> None:
        """The before-start hook, its leases given back where it does not return."""
        assert self.before_start is not None
        try:
            self.before_start(spec, topo)
        except BaseException as exc:
            topo.stop_after(exc)  # nothing spawned: the leases go back
            raise

    def _relay(self, name: str) -> Callable[[dict[str, Any]], None]:
        def said(e: dict[str, Any]) -> None:
            state = STATE_WORDS.get(str(e["state"]), str(e["state"]))
            self.say(f"  {name} +{e['t']:.1f} s {e['role']}: {state}")

        return said

    def topology_for(self, spec: LaunchSpec) -> Topology[Any] | None:
        """The live or failed topology this launch ran (or tried to run) on."""
        signature = spec.signature
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
        if topo is not None:  # said after the outcome of the case whose teardown this is
            seconds = time.monotonic() - started
            self.say(f"{AFTER_CASE}{topo.plan.profile} torn down in {seconds:.1f} s")

    def __enter__(self) -> TopologyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
