"""AheadStart: the next launch, started while the current one runs its cases and tears down.

Opt-in (HARNESS_OVERLAP=1): on the 2-core box it does not pay. Measured side by side with
bench/startup.py over the 27 CPU cases: 397.9 s with it, 400.0 s without (0.99x); the launches
started ahead took 1.25x as long to become ready, since a launch's start-up is CPU-bound (each
role imports vLLM twice) and a launch's cases and teardown leave little CPU idle. It may pay on a
box with cores to spare; measure there with `HARNESS_OVERLAP=1 python bench/startup.py --run
--baseline-env HARNESS_OVERLAP=0`. Its readiness is polled in a thread of its own, against its
own clock, so its phases, ready_s and failures are its own; its progress lines are held back
until it becomes the current launch, so they never interleave with the current launch's."""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable

from harness.runtime.served import ServedTopology, StartCancelled

OVERLAP_ENV = "HARNESS_OVERLAP"  # "1": start the next launch ahead; default one at a time


def overlap_enabled() -> bool:
    return os.environ.get(OVERLAP_ENV, "0") == "1"


class AheadStart:
    """One topology spawned now (in the calling, main thread: signal handlers and leases) and
    waited for in a background thread. `ready()` hands it over, or raises why it did not start;
    `abandon()` stops it unused."""

    def __init__(self, signature: str, topo: ServedTopology) -> None:
        self.signature = signature
        self.topo = topo
        self.held_lines: list[dict[str, object]] = []
        topo.timeline.listeners.append(self.held_lines.append)
        topo.start()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ahead-start")
        self._waited = self._pool.submit(topo.wait_ready)

    def ready(self, relay: Callable[[dict[str, object]], None]) -> ServedTopology:
        """Wait until it is ready (its own budget still applies), relaying the held events;
        its failure is raised as it would have been in the foreground, after stopping it."""
        try:
            self._waited.result()
        except BaseException as exc:
            self.topo.stop_after(exc)
            raise
        finally:
            self._pool.shutdown(wait=True)
            self.topo.timeline.listeners.remove(self.held_lines.append)
            for event in self.held_lines:
                relay(event)
            self.topo.timeline.listeners.append(relay)
        return self.topo

    def abandon(self) -> None:
        """Stop it unused (the run went another way, or the session ends)."""
        self.topo.cancel_start()
        self._pool.shutdown(wait=True)
        exc = self._waited.exception()
        self.topo.stop_after(exc if exc is not None else StartCancelled("abandoned"))
