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
    after, frontend = settled(topo, before, frontend_before, watch)
    logged = logged_since(topo, sizes)
    return Measured(resp, before, after, frontend, tap, crossed_before, crossed_own, logged)


def settled(
    topo: RunningTopology, before: Counters, frontend_before: FrontendTally | None, watch: Watch
) -> tuple[Counters, FrontendTally | None]:
    """The workers' counters once `watch.settled` says they settled, and how the frontend's
    histograms moved once those watched moved (None: not watched, or no /metrics): both waited
    for together, each read until it settles or SETTLE_S has passed since the answer."""
    deadline = time.monotonic() + SETTLE_S
    after, moved = topo.role_counters(), None
    workers = watch.settled(before, after)
    frontend = frontend_before is None
    while True:
        if not frontend and frontend_before is not None:
            tally = topo.frontend_tally()
            moved = tally.since(frontend_before) if tally is not None else None
            frontend = moved is None or frontend_moved(moved, watch)
        if (workers and frontend) or time.monotonic() > deadline:
            return after, moved
        time.sleep(SETTLE_POLL_S)
        if not workers:
            after = topo.role_counters()
            workers = watch.settled(before, after)


def frontend_moved(moved: FrontendTally, watch: Watch) -> bool:
    """Every histogram the watch waits for has moved."""
    images = bool(moved.image.requests) or not watch.image_tokens
    return images and (bool(moved.router.decisions) or not watch.router)


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
