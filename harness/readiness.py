"""Readiness phases, in order. Each is a small strategy: `done(topology)` polls once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import requests

if TYPE_CHECKING:
    from harness.topology import Topology


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
    """One real request per media kind goes through every stage and answers 200."""

    name = "warmed_up"

    def __init__(self, bodies: Sequence[dict[str, Any]]) -> None:
        self.pending = list(bodies)
        self.last_error = ""

    def done(self, topo: Topology) -> bool:
        while self.pending:
            try:
                resp = topo.post_chat(self.pending[0], check_roles=False)
            except requests.RequestException as exc:
                self.last_error = str(exc)
                return False
            if resp.status_code != 200:
                self.last_error = f"HTTP {resp.status_code}: {resp.text[:300]}"
                return False
            self.pending.pop(0)
        return True

    def waiting_for(self, topo: Topology) -> str:
        return f"{len(self.pending)} warm-up request(s) to answer 200 (last: {self.last_error})"


def default_phases(warmups: Sequence[dict[str, Any]]) -> list[Phase]:
    return [WorkersHealthy(), ModelListed(), WarmedUp(warmups)]
