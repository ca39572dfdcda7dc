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
    HARNESS_FAULT = "harness_fault"  # the harness's own code in a role's process failed


# What each cause means, as a user reads it (docs/reference/causes.md is generated from this).
CAUSE_MEANS: dict[Cause, str] = {
    Cause.LAUNCHER_INVALID: (
        "the launcher does something no tier would run (a worker on another model, with no "
        "system port, on another role's port, on a port nobody leased, named with its holder), "
        "or asks for what this tier cannot reproduce (a flag with no mapping); the message says "
        "which: 'the launcher is at fault' or 'the cpu tier cannot run it'"
    ),
    Cause.LAUNCHER_EXITED: "the launcher script itself exited before the topology was ready",
    Cause.ROLE_EXITED: "a role's process exited (the first one, with its exit code and log tail)",
    Cause.ROLE_NOT_STARTED: (
        "a declared role the launcher never starts, named once the roles it did start have been "
        "ready a grace"
    ),
    Cause.ROLE_UNREACHABLE: "target mode: a deployed topology's role whose URL does not answer",
    Cause.PORT_IN_USE: (
        "a port the launch needs is held (a fixed port in the launcher, or a worker whose system "
        "port another role holds), named with the holder"
    ),
    Cause.NO_HEALTH_SOURCE: (
        "a worker reports every endpoint ready but status notready: it has no health source "
        "(its /health would answer 503 forever)"
    ),
    Cause.NEVER_REGISTERED: (
        "the model is not served: the role missing from discovery, registered with an endpoint "
        "but no model card, or under another model, with the cards present and the peers the "
        "frontend still waits for; also a frontend that cannot build the model's pipeline"
    ),
    Cause.PHASE_TIMEOUT: "a readiness phase ran past the launch's budget (what it waited for)",
    Cause.REQUEST_TIMEOUT: "a request got no answer within its budget",
    Cause.HTTP_ERROR: (
        "a request answered an unexpected status, with the role that logged a Python traceback "
        "meanwhile and its exception line"
    ),
    Cause.WRONG_ANSWER: (
        "an answer failed an oracle: its text, its log-probabilities against the model's own, "
        "its token counts, a declared defect that no longer shows"
    ),
    Cause.WRONG_PATH: (
        "a role that should have served a request did not, or the reverse, with its request counter"
    ),
    Cause.CACHE_MISS: "a repeated request the prefix cache did not serve",
    Cause.ROUTER_MISS: (
        "a KV router whose own hit rate says it saw cached repeats uncached: its block hashes "
        "are not the worker's"
    ),
    Cause.MODEL_NOT_CACHED: "the GPU tier's model is not in the Hugging Face cache (offline)",
    Cause.TEARDOWN_UNCLEAN: "a process, port or file of the topology outlived its teardown",
    Cause.EXPOSED_LISTENER: (
        "once ready, a socket of the topology listens beyond 127.0.0.1 without the profile "
        "saying why"
    ),
    Cause.HARNESS_FAULT: (
        "the harness's own code in a role's process failed (its role site, which every role "
        "imports first: Python's 'Error in sitecustomize' and the error it names): the system "
        "under test is not judged"
    ),
}


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
