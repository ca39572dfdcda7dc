"""One request measured on a running topology, as one value the case loop judges: `measure` sends
it and returns `Measured`, each worker's counters before it and once they settled after it, how
the frontend's histograms moved, the encoder rows that crossed while it was served, and what
each role's log gained meanwhile. `Watch` says what to wait for and what to keep."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from harness.topology.observed import RunningTopology
from harness.topology.role_metrics import FrontendTally, WorkerCounters, prompt_tokens_ran
from harness.topology.tapped import crossed_names, tap_dir

Counters = dict[str, WorkerCounters | None]

# A counter scraped right after the answer may not have moved yet: it is read again until it
# settles or this long has passed (the frontend records its histograms just after answering).
SETTLE_S = 1.0
SETTLE_POLL_S = 0.1


@dataclass(frozen=True)
class Watch:
    """What a measurement waits for and keeps beyond each worker's counters."""

    # the workers' counters have settled: every role the request must reach counted it
    settled: Callable[[Counters, Counters], bool] = lambda before, after: True
    image_tokens: bool = False  # wait for the frontend's image-token histogram to move
    router: bool = False  # wait for the KV router's hit-rate histogram to move
    logs: bool = False  # keep what each worker's log gained while it was served


@dataclass(frozen=True)
class Measured:
    resp: requests.Response
    before: Counters
    after: Counters  # settled (Watch.settled), or as they were SETTLE_S after the answer
    frontend: FrontendTally | None  # how its histograms moved (None: not watched or no /metrics)
    tap_dir: Path | None = None  # where the launch's rows are tapped (tapped.py; None: nowhere)
    crossed_before: frozenset[str] | None = None
    # of the rows' files that crossed after it was sent, those written before its answer came
    crossed_own: frozenset[str] | None = None
    logged: dict[str, str] = field(default_factory=dict)

    @property
    def ran(self) -> dict[str, int]:
        """The prompt tokens each engine role ran for it (none for an answer that is not 200)."""
        return prompt_tokens_ran(self.before, self.after) if self.resp.status_code == 200 else {}


def measure(topo: RunningTopology, body: dict[str, object], watch: Watch) -> Measured:
    """Send `body` as a chat request on `topo` and measure it (TopologyFailure: a role died)."""
    sizes = log_sizes(topo) if watch.logs else {}
    before = topo.role_counters()
    frontend_before = topo.frontend_tally() if watch.image_tokens or watch.router else None
    tap = tap_dir(topo.plan)
    crossed_before = crossed_names(tap) if tap else None
    resp = topo.post_chat(body)
    # of what crossed since, what was written before its answer came: its twins come after it
    crossed_own = crossed_names(tap) - crossed_before if crossed_before is not None else None
    after = settled(topo, before, watch.settled)
    frontend = settled_frontend(topo, frontend_before, watch) if frontend_before else None
    logged = logged_since(topo, sizes)
    return Measured(resp, before, after, frontend, tap, crossed_before, crossed_own, logged)


def settled(
    topo: RunningTopology, before: Counters, done: Callable[[Counters, Counters], bool]
) -> Counters:
    """The workers' counters once `done` says they settled, or SETTLE_S after they were asked."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = topo.role_counters()
        if done(before, after) or time.monotonic() > deadline:
            return after
        time.sleep(SETTLE_POLL_S)


def settled_frontend(
    topo: RunningTopology, before: FrontendTally, watch: Watch
) -> FrontendTally | None:
    """How the frontend's histograms moved, once those watched moved (or SETTLE_S passed)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = topo.frontend_tally()
        if after is None:
            return None
        moved = after.since(before)
        images = moved.image.requests or not watch.image_tokens
        if (images and (moved.router.decisions or not watch.router)) or (
            time.monotonic() > deadline
        ):
            return moved
        time.sleep(SETTLE_POLL_S)


def log_sizes(topo: RunningTopology) -> dict[str, int]:
    """How long each worker's log is now (where this machine has it)."""
    logs = {role.name: topo.role_log(role.name) for role in topo.plan.workers}
    return {role: path.stat().st_size for role, path in logs.items() if path and path.is_file()}


def logged_since(topo: RunningTopology, sizes: dict[str, int]) -> dict[str, str]:
    """What each worker's log gained since `sizes` (log_sizes)."""
    gained = {}
    for role, size in sizes.items():
        path = topo.role_log(role)
        if path is not None:
            with path.open("rb") as log:
                log.seek(size)
                gained[role] = log.read().decode(errors="replace")
    return gained
