"""Verdict causes: each fault the harness can name, with its evidence."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class Cause(StrEnum):
    LAUNCHER_INVALID = "launcher_invalid"
    LAUNCHER_EXITED = "launcher_exited"
    ROLE_EXITED = "role_exited"
    ROLE_NOT_STARTED = "role_not_started"
    ROLE_UNREACHABLE = "role_unreachable"  # target mode: a deployed role's URL does not answer
    PORT_IN_USE = "port_in_use"
    NO_HEALTH_SOURCE = "no_health_source"
    NEVER_REGISTERED = "never_registered"
    PHASE_TIMEOUT = "phase_timeout"
    REQUEST_TIMEOUT = "request_timeout"
    HTTP_ERROR = "http_error"
    WRONG_ANSWER = "wrong_answer"
    WRONG_PATH = "wrong_path"
    CACHE_MISS = "cache_miss"  # a repeated request missed the prefix cache (oracles/serving.py)
    ROUTER_MISS = "router_miss"  # the KV router saw no cached blocks for a cached repeat
    MODEL_NOT_CACHED = "model_not_cached"
    TEARDOWN_UNCLEAN = "teardown_unclean"
    EXPOSED_LISTENER = "exposed_listener"


@dataclass
class Evidence:
    phase: str = ""
    elapsed_s: float = 0.0
    role: str | None = None
    port: int | None = None
    exit_code: int | None = None
    health: dict[str, str] = field(default_factory=dict)
    log_tail: str = ""
    detail: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class TopologyFailure(Exception):
    """A fault with a named cause. str() is the one-line human message. `named_at`: the
    monotonic clock when the harness named it, before any teardown the raise goes through."""

    def __init__(self, cause: Cause, message: str, evidence: Evidence | None = None) -> None:
        super().__init__(f"[{cause}] {message}")
        self.cause = cause
        self.message = message
        self.evidence = evidence or Evidence()
        self.named_at = time.monotonic()

    def report(self) -> str:
        ev = self.evidence
        parts = [str(self), f"phase: {ev.phase} after {ev.elapsed_s:.1f} s"]
        if ev.health:
            parts.append("last health: " + "; ".join(f"{k}: {v}" for k, v in ev.health.items()))
        if ev.log_tail:
            parts.append(f"log tail ({ev.role or 'launcher'}):\n{ev.log_tail}")
        return "\n".join(parts)
