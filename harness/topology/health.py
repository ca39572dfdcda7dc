"""A worker's health, seen from outside: one probe of its system port's /health per poll (`probe`),
the 'no health source' signature (`HealthSample.no_health_source`: every endpoint ready, status
notready), and each role's state over the launch (`HealthTimeline`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class HealthSample:
    state: str  # down | notready | ready | error
    status: int | None
    body: str

    @property
    def no_health_source(self) -> bool:
        """Every registered endpoint is ready, yet the worker says notready: nothing feeds it."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return False
        endpoints = data.get("endpoints") if isinstance(data, dict) else None
        return (
            self.status == 503
            and data.get("status") == "notready"
            and isinstance(endpoints, dict)
            and bool(endpoints)
            and all(v == "ready" for v in endpoints.values())
        )


def probe(url: str, session: requests.Session | None = None) -> HealthSample:
    http = session or requests
    try:
        resp = http.get(url, timeout=PROBE_TIMEOUT_S)
    except requests.ConnectionError:
        return HealthSample("down", None, "")
    except requests.RequestException as exc:
        return HealthSample("error", None, str(exc))
    state = "ready" if resp.status_code == 200 else "notready"
    return HealthSample(state, resp.status_code, resp.text[:500])


@dataclass
class HealthTimeline:
    """State changes per role, seconds since the topology started."""

    start: float = field(default_factory=time.monotonic)
    events: list[dict[str, object]] = field(default_factory=list)
    current: dict[str, str] = field(default_factory=dict)
    # called with each new event as it is recorded (the run's progress lines)
    listeners: list[Callable[[dict[str, object]], None]] = field(default_factory=list)

    def record(self, role: str, state: str) -> None:
        if self.current.get(role) != state:
            self.current[role] = state
            event = {"role": role, "t": round(time.monotonic() - self.start, 3), "state": state}
            self.events.append(event)
            for listener in self.listeners:
                listener(event)

    def entered(self, state: str, role: str | None = None) -> list[float]:
        """When `role` (any role if None) entered `state`, in seconds since the start, in order."""
        return [
            float(str(ev["t"]))
            for ev in self.events
            if ev["state"] == state and (role is None or ev["role"] == role)
        ]

    def since_state(self, role: str, state: str) -> float | None:
        """Seconds the role has been in `state` continuously, or None if it is not in it."""
        if self.current.get(role) != state:
            return None
        for ev in reversed(self.events):
            if ev["role"] == role:
                return time.monotonic() - self.start - float(str(ev["t"]))
        return None
