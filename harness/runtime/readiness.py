"""Readiness phases, in order. Each is a small strategy: `done(topology)` polls once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import requests

from harness.core.verdict import Cause
from harness.runtime.listeners import exposed_listeners

if TYPE_CHECKING:
    from harness.runtime.topology import Topology


class Phase(Protocol):
    name: str

    def done(self, topo: Topology) -> bool: ...

    def waiting_for(self, topo: Topology) -> str: ...


class WorkersHealthy:
    """Every worker role's system port answers /health 200."""

    name = "workers_healthy"

    def done(self, topo: Topology) -> bool:
        return all(topo.health_state(r.name) == "ready" for r in topo.plan.workers)

    def waiting_for(self, topo: Topology) -> str:
        pending = [r.name for r in topo.plan.workers if topo.health_state(r.name) != "ready"]
        return f"/health 200 from {pending}"


class ModelListed:
    """The frontend's /v1/models lists the served model (its /health is 200 with no workers)."""

    name = "model_listed"

    def done(self, topo: Topology) -> bool:
        return topo.plan.served_model_name in topo.listed_models()

    def waiting_for(self, topo: Topology) -> str:
        return f"{topo.plan.served_model_name} in /v1/models (listed: {topo.listed_models()})"


class WarmedUp:
    """One real request per media kind goes through every stage and answers 200.

    404/503 mean "not routable yet" and are retried; any other error repeated
    `REPEATS_TO_FAIL` times in a row is a real fault (e.g. a 500 for an unsupported media path).
    """

    name = "warmed_up"
    RETRYABLE = (404, 503)
    REPEATS_TO_FAIL = 3

    def __init__(self, bodies: Sequence[dict[str, Any]]) -> None:
        self.pending = list(bodies)
        self.last_error = ""
        self.repeats = 0

    def done(self, topo: Topology) -> bool:
        while self.pending:
            try:
                resp = topo.post_chat(self.pending[0], check_roles=False)
            except requests.RequestException as exc:
                self.last_error = str(exc)
                return False
            if resp.status_code != 200:
                error = f"HTTP {resp.status_code}: {resp.text[:300]}"
                self.repeats = self.repeats + 1 if error == self.last_error else 1
                self.last_error = error
                if resp.status_code not in self.RETRYABLE and self.repeats >= self.REPEATS_TO_FAIL:
                    raise topo.failure(
                        Cause.HTTP_ERROR,
                        f"warm-up request answered {error} {self.repeats} times "
                        f"(media: {media_kinds(self.pending[0])})",
                    )
                return False
            self.pending.pop(0)
        return True

    def waiting_for(self, topo: Topology) -> str:
        return f"{len(self.pending)} warm-up request(s) to answer 200 (last: {self.last_error})"


class LoopbackOnly:
    """Every socket the topology listens on is bound to loopback (checked once, when ready)."""

    name = "loopback_only"

    def done(self, topo: Topology) -> bool:
        exposed = exposed_listeners(p.pid for p in topo.processes())
        if exposed:
            raise topo.failure(
                Cause.EXPOSED_LISTENER,
                f"listening beyond 127.0.0.1: {exposed}; bind it to 127.0.0.1 in the launcher",
            )
        return True

    def waiting_for(self, topo: Topology) -> str:
        return "the loopback check"


def media_kinds(body: dict[str, Any]) -> list[str]:
    return [p["type"] for m in body.get("messages", []) for p in m.get("content", [])
            if isinstance(p, dict) and p.get("type") != "text"]  # fmt: skip


def default_phases(warmups: Sequence[dict[str, Any]]) -> list[Phase]:
    return [WorkersHealthy(), ModelListed(), WarmedUp(warmups), LoopbackOnly()]
