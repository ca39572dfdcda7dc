"""ServedTopology: a topology that answers at known URLs (vLLM's RemoteOpenAIServer): it owns
the URLs, the HTTP client, each role's health and counters, and running the readiness phases
under one deadline. A deployed target is one as it is; a launched one (launched.py) adds spawn,
watch and a verified stop."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import requests

from harness.core.secrets import scrub_text
from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.runtime.generate_counter import WorkerCounters, requests_of, scrape
from harness.runtime.health import HealthSample, HealthTimeline, probe
from harness.runtime.plan import LaunchPlan, RolePlan
from harness.runtime.readiness import Phase
from harness.runtime.roles import tail

POLL_S = 0.25


class StartCancelled(Exception):
    """wait_ready was told to give up (the pool no longer wants this topology)."""


class ServedTopology:
    """A topology behind a plan's URLs. `with topo:` waits until it is ready; leaving stops it
    (for a deployed one: releases the client, stops nothing)."""

    def __init__(self, plan: LaunchPlan, phases: Sequence[Phase]) -> None:
        self.plan = plan
        self.phases = list(phases)
        self.timeline = HealthTimeline()
        self.samples: dict[str, HealthSample] = {}
        self.phase_times: dict[str, float] = {}
        self.ready_s: float | None = None
        self.phase = "spawn"
        self.peak_rss_mib = 0.0
        self.healthy_once: set[str] = set()
        self._http = requests.Session()
        self._cancel = threading.Event()

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> ServedTopology:
        try:
            self.start()
            self.wait_ready()
        except BaseException as exc:
            self.stop_after(exc)
            raise
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.stop_after(exc)
        else:
            self.stop()

    def start(self) -> None:
        self.plan.log_dir.mkdir(parents=True, exist_ok=True)

    def stop(self) -> None:
        self.phase = "teardown"
        self._http.close()

    def stop_after(self, exc: BaseException) -> None:
        """Stop after `exc`; an unclean stop is added to a failure's evidence instead of
        replacing its cause."""
        try:
            self.stop()
        except TopologyFailure as unclean:
            if not isinstance(exc, TopologyFailure):
                raise
            exc.evidence.detail["teardown"] = unclean.message

    def wait_ready(self) -> None:
        """Run the phases in order under one deadline (`total_s`): each gets what is left and
        returns its failure; none can run past it."""
        deadline = self.timeline.start + self.plan.budget.total_s
        for phase in self.phases:
            self.phase = phase.name
            while True:
                if self._cancel.is_set():
                    raise StartCancelled(f"{self.plan.profile}: start cancelled")
                self.watch()
                left = deadline - time.monotonic()
                failure = phase.failure(self, left)
                if failure is not None:
                    raise failure
                if phase.done(self, left):
                    self.phase_times[phase.name] = round(self.elapsed(), 3)
                    break
                time.sleep(max(0.0, min(POLL_S, left)))
        self.phase = "ready"
        self.ready_s = self.elapsed()

    def cancel_start(self) -> None:
        """Make a wait_ready running in another thread stop at its next poll."""
        self._cancel.set()

    # -- observation -----------------------------------------------------------------------
    def watch(self) -> None:
        """One look at every role; raises at the first fault it sees."""
        for _ in self.probe_workers():
            pass

    def processes(self) -> list[psutil.Process]:
        """The processes of this topology this machine can see (none for a deployed one)."""
        return []

    def elapsed(self) -> float:
        return time.monotonic() - self.timeline.start

    def probe_workers(self) -> Iterator[tuple[RolePlan, str]]:
        """Probe each worker's health URL in turn, recording it; yields (role, probed state)."""
        for role in self.plan.workers:
            assert role.health_url is not None
            sample = probe(role.health_url, self._http)
            self.samples[role.name] = sample
            state = "no_health_source" if sample.no_health_source else sample.state
            self.timeline.record(role.name, state)
            if state == "ready":
                self.healthy_once.add(role.name)
            yield role, sample.state

    def health_state(self, role: str) -> str:
        sample = self.samples.get(role)
        return sample.state if sample else "unknown"

    def health_summary(self) -> dict[str, str]:
        out = {}
        for role in self.plan.roles:
            if role.name in self.samples:
                s = self.samples[role.name]
                out[role.name] = f"{s.state} {s.status or ''} {s.body[:160]}".strip()
            else:
                out[role.name] = self.unprobed_state(role.name)
        return out

    def unprobed_state(self, role: str) -> str:
        """What is known of a role with no health port (the frontend, an aux process)."""
        return "not probed"

    def role_counters(self) -> dict[str, WorkerCounters | None]:
        """Each worker's counters now (None: its /metrics did not answer)."""
        return {
            r.name: scrape(r.metrics_url, self._http) for r in self.plan.workers if r.metrics_url
        }

    def request_counts(self) -> dict[str, float | None]:
        """Each worker's `generate` request counter now (None: its /metrics did not answer)."""
        return requests_of(self.role_counters())

    def listed_models(self) -> list[str]:
        try:
            resp = self._http.get(self.url_for("/v1/models"), timeout=2)
            return [m["id"] for m in resp.json().get("data", [])] if resp.ok else []
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return []

    # -- clients ---------------------------------------------------------------------------
    def url_for(self, path: str) -> str:
        return f"{self.plan.frontend_url}{path}"

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response:
        """POST /v1/chat/completions; while waiting, a role death is reported within a poll.
        `timeout_s`: at most this long (default: the budget's `request_s`)."""
        body = {"model": self.plan.served_model_name, **body}
        timeout = self.plan.budget.request_s if timeout_s is None else max(timeout_s, POLL_S)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(
                self._http.post, self.url_for("/v1/chat/completions"), json=body, timeout=timeout
            )
            deadline = time.monotonic() + timeout + 1
            while True:
                try:
                    return future.result(timeout=POLL_S)
                except concurrent.futures.TimeoutError:
                    if check_roles:
                        self.watch()
                    if time.monotonic() > deadline:
                        break
                except requests.Timeout:
                    break
        raise self.failure(
            Cause.REQUEST_TIMEOUT,
            f"no answer to a chat request within {timeout:.0f} s; roles: {self.health_summary()}",
        )

    # -- failures --------------------------------------------------------------------------
    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure:
        log_tail = ev.pop("log_tail", None)
        role = ev.get("role")
        if log_tail is None and role:
            log_tail = self.role_log_tail(role)
        evidence = Evidence(
            phase=self.phase,
            elapsed_s=round(self.elapsed(), 2),
            health=self.health_summary(),
            log_tail=scrub_text(log_tail or "", self.plan.env),
            **ev,
        )
        return TopologyFailure(cause, message, evidence)

    def role_log(self, role: str) -> Path | None:
        """Where a role's log is, if this machine has it (not for a deployed one)."""
        return None

    def role_log_tail(self, role: str, lines: int | None = None) -> str:
        """The end of a role's log worth reading, where this machine has it."""
        path = self.role_log(role)
        if path is None:
            return ""
        return tail(path) if lines is None else tail(path, lines)
