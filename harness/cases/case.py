"""A serve case (one profile's case on a tier) and how it runs.

- `ServeCase`: the case, its requests as this tier sends them, why it cannot run here, its
  launch signature.
- `run_case`: launch (or reuse) the topology, send every request, judge each answer (its path
  settled from the roles' own counters), then the case's answers together.
- `TopologyPool`: one topology serving cases at a time (a 2-core box cannot run two); cases that
  share a launch signature share it, and a failed launch fails the rest of its cases at once
  with the same cause.

Which cases run, in which order and on which shard: selection.py."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import pytest
from requests import Response

from harness.cases.results import AFTER_CASE
from harness.core.paths import sglang_python, sglang_venv_left_out
from harness.core.precision import family_dtype
from harness.core.verdict import Cause, TopologyFailure
from harness.machine.engines import missing_engine
from harness.machine.gpu_leases import GpuUnavailable, shortfall
from harness.machine.gpus import GpuInventory
from harness.machine.memory_plan import plan_memory
from harness.machine.port_registry import PortRegistry
from harness.oracles.answer import Answer, CaseRun, CaseScope, Scope
from harness.oracles.boundary import names_before
from harness.oracles.checks import OracleResult
from harness.oracles.judge import CaseJudge, Judging
from harness.oracles.reference import TOP_LOGPROBS
from harness.oracles.registry import applicable, applicable_to_case
from harness.oracles.serving import RequestHit, check_path, expected_path, request_hit, with_filler
from harness.payloads.chat import MediaURLs, request_body
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier
from harness.topology.diagnoses import launcher_name
from harness.topology.dynamo_src import DynamoSource
from harness.topology.held_request import HeldRequest
from harness.topology.launch_spec import LaunchSpec
from harness.topology.plan import ENCODER_TAP_ENV
from harness.topology.role_adapter import no_port_roles
from harness.topology.roles import (
    FrontendTally,
    WorkerCounters,
    prompt_tokens_ran,
    requests_of,
)
from harness.topology.topology import Topology, launch

XPU_CPU_SKIP = (
    "an Intel XPU profile: on the CPU tier ours runs the same launcher as the CUDA profile of its "
    "topology; only a Dynamo checkout's own XPU launcher (--dynamo-src) is another program"
)
XPU_SKIP = (
    "Intel XPU profile: needs an XPU runner (Level Zero devices, vLLM's XPU build); this "
    "harness leases NVIDIA GPUs it finds through NVML"
)


@dataclass(frozen=True)
class ServeCase:
    profile: Profile
    case: CaseSpec
    tier: Tier
    source: DynamoSource | None = None  # the Dynamo checkout under test (--dynamo-src)

    @property
    def test_id(self) -> str:
        return self.profile.test_id(self.case)

    @property
    def requests(self) -> list[RequestSpec]:
        """Every request the case sends, in order, repeats included (the case's own first)."""
        own = self.case_request
        return [r for r in (own, *self.case.follow_ups) for _ in range(r.repeat)]

    @property
    def case_request(self) -> RequestSpec:
        """The case's own request as this tier sends it: on the CPU, a cache-hit case's prompt
        spans whole KV blocks (schema.CacheHit.cpu_prompt_filler_repeats)."""
        hit = self.case.cache_hit
        if hit is None or self.tier != "cpu" or not hit.cpu_prompt_filler_repeats:
            return self.case
        prompt = with_filler(self.case.prompt, hit.cpu_prompt_filler_repeats)
        return self.case.model_copy(update={"prompt": prompt})

    def skip_reason(self, inventory: GpuInventory | None) -> str | None:
        """Why this case cannot run here; on the GPU tier `inventory` is what the machine offers
        (None: judge only what no machine could change)."""
        missing = self.launch_spec.choice.missing if self.signature else None
        if missing:
            return missing
        if self.tier == "cpu":
            if self.profile.cpu is None:
                return f"GPU tier only: {self.profile.cpu_skip}"
            if self.case.cpu_skip:
                return f"GPU tier only: {self.case.cpu_skip}"
            if self.profile.accelerator == "xpu" and self.launch_spec.choice.origin == "ours":
                return XPU_CPU_SKIP
            if self.profile.stack == "dynamo-sglang" and not sglang_python().exists():
                if sglang_venv_left_out():
                    return "HARNESS_SGLANG_CPU=0: the CPU tier's SGLang venv is not built here"
                return (
                    f"the CPU tier's SGLang venv is not installed ({sglang_python()}): run "
                    "scripts/bootstrap.sh (HARNESS_SGLANG_CPU=0 skips building it)"
                )
            return None
        if self.profile.gpu_skip:
            return f"CPU tier only: {self.profile.gpu_skip}"
        if self.case.gpu_skip:
            return self.case.gpu_skip
        if self.profile.accelerator == "xpu":
            return XPU_SKIP
        if inventory is None:
            return None
        needs = plan_memory(self.profile).per_device()
        short = shortfall(inventory.devices, needs, inventory.refused)
        if short is not None:
            return short
        return missing_engine(self.profile.stack)

    @cached_property
    def launch_spec(self) -> LaunchSpec:
        """The launch this case runs on (a profile without this tier has none: ValueError)."""
        return LaunchSpec.of(self.profile, self.tier, self.case, source=self.source)

    @property
    def signature(self) -> str | None:
        """Cases with equal signatures share one launched topology, across profiles too (e.g.
        `epd` and `epd_video` run on the same E/P/D launch); None: no launch on this tier."""
        return None if self.profile.tier(self.tier) is None else self.launch_spec.signature


@dataclass
class CaseRecord:
    """What one case did, for the results file and the failure report."""

    topology: Topology[Any] | None = None
    reused: bool = False
    answers: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    report: Any = None  # the setup or call TestReport that decides the outcome
    failure: BaseException | None = None
    teardown_failure: BaseException | None = None
    teardown_s: float | None = None
    # per request: (HTTP status, how many oracles reading the answer's content passed)
    verdicts: list[tuple[int, int]] = field(default_factory=list)
    max_logprob_gap: float | None = None  # the largest |engine - model| logprob of its answers
    # the requests no numeric oracle vouched for (CPU tier), each with why
    unnumbered: list[str] = field(default_factory=list)


def run_case(
    sc: ServeCase, pool: TopologyPool, urls: MediaURLs, judging: Judging, record: CaseRecord
) -> list[str]:
    """Launch (or reuse) the topology, send every request, judge each answer. A failure is
    recorded against the case's requests (others compare with their answers) and raised."""
    try:
        return judged_case(sc, pool, urls, judging, record)
    except TopologyFailure as failure:
        judging.failed(sc.requests, sc.tier, sc.profile, sc.test_id, failure.cause.value)
        raise


def judged_case(
    sc: ServeCase, pool: TopologyPool, urls: MediaURLs, judging: Judging, record: CaseRecord
) -> list[str]:
    try:
        topo = pool.get(sc.launch_spec)
    except GpuUnavailable as unavailable:  # the machine changed since collection
        pytest.skip(str(unavailable))
    except TopologyFailure:
        record.topology = pool.topology_for(sc.launch_spec)  # evidence of the failed launch
        raise
    record.topology, record.reused = topo, not pool.launched_here
    try:
        judge_requests(sc, topo, pool, urls, judging, record)
    except TopologyFailure as failure:
        fault = launcher_fault(topo, f"failed: {failure.message}")
        if fault is not None:
            raise fault from None
        raise
    fault = launcher_fault(topo, "passed: " + "; ".join(record.checks))
    if fault is not None:
        raise fault
    return record.checks


def launcher_fault(topo: Topology[Any], judged: str) -> TopologyFailure | None:
    """A launcher fault that let the topology serve (a worker started without a system port:
    role_adapter NAME.noport): the case fails naming it, with how its answers were judged."""
    if topo.plan.frontend is not None:  # a deployed target: no launcher of ours to read
        return None
    faults = no_port_roles(topo.plan.log_dir)
    if not faults:
        return None
    role, why = next(iter(faults.items()))
    return topo.failure(
        Cause.LAUNCHER_INVALID,
        f"role '{role}' of {launcher_name(topo)}: the launcher is at fault: {why}. Its answers "
        f"were judged all the same: {judged}",
        role=role,
    )


def judge_requests(
    sc: ServeCase,
    topo: Topology[Any],
    pool: TopologyPool,
    urls: MediaURLs,
    judging: Judging,
    record: CaseRecord,
) -> None:
    """Send every request of the case on its launch and judge each answer, then the case's
    answers together (into `record.checks`)."""
    model, signature = topo.plan.model, topo.plan.signature
    judge = CaseJudge(sc.tier, judging.baselines, signature, judging.settings)
    case_counters = topo.role_counters()
    case_start = requests_of(case_counters)
    hits: list[RequestHit | None] = []
    requests = sc.requests
    for request in requests:
        repeat_of_case = request is requests[0]
        scope = Scope(request, sc.tier, sc.profile, judging.settings)
        body = request_body(request, urls, TOP_LOGPROBS if sc.tier == "cpu" else None)
        before = topo.role_counters()
        routed = bool(sc.case.cache_hit and sc.profile.replicas and repeat_of_case)
        frontend_before = topo.frontend_tally() if request.image_token_metrics or routed else None
        crossed_before = names_before(tap_dir(topo))
        try:
            resp = topo.post_chat(body)
        except TopologyFailure as failure:
            pool.discard(failure)
            raise
        record.answers.append({"status": resp.status_code, "text": resp.text[:2000]})
        path, after = settled_path(topo, request, before, sc.profile.replicas)
        ran = prompt_tokens_ran(before, after) if resp.status_code == 200 else {}
        frontend = settled_frontend(topo, frontend_before, request.image_token_metrics, routed)
        if sc.case.cache_hit and repeat_of_case and resp.status_code == 200:
            usage = resp.json().get("usage")
            hits.append(request_hit(usage, before, after, frontend.router if frontend else None))
        answer = Answer(
            scope,
            body,
            resp,
            model,
            urls,
            judging.baselines,
            signature,
            ran=ran,
            path=path,
            sent=declared_requests(scope, urls, topo),
            tap_dir=tap_dir(topo),
            crossed_before=crossed_before,
            image_tokens=frontend.image if frontend and request.image_token_metrics else None,
        )
        if resp.status_code == 200:
            record.answers[-1]["content"] = answer.content
        content_before = judge.content_passed
        try:
            record.checks += judge.judge(answer)
        except TopologyFailure as failure:
            if resp.status_code >= 500:  # the role whose log holds the cause, where one does
                raise topo.failure(failure.cause, failure.message) from None
            raise
        finally:  # a failing answer's gap is evidence too
            if answer.logprob_gap is not None:
                record.max_logprob_gap = max(record.max_logprob_gap or 0.0, answer.logprob_gap)
        record.verdicts.append((resp.status_code, judge.content_passed - content_before))
        if judge.unnumbered:
            record.unnumbered.append(judge.unnumbered)
    run = CaseRun(CaseScope(sc.case, sc.tier, sc.profile), case_start, hits)
    if sc.case.embedding_cache_hit:
        run.embedding_hits = embedding_hits_of(case_counters, topo.role_counters())
    run.statuses, run.end_counts, run.held = declared_while_busy(run.scope, topo)
    record.checks += judge.judge_case(run)


def declared_requests(scope: Scope, urls: MediaURLs, served: Served) -> dict[str, Response]:
    """The requests the answer's oracles need answered to judge it (Oracle.sends), sent one
    after another on the same launch, by the name each oracle gave."""
    bodies: dict[str, dict[str, Any]] = {}
    for oracle in applicable(scope):
        bodies.update(oracle.sends(scope, urls))
    return {name: served.post_chat(body) for name, body in bodies.items()}


# Holds tried before a spread is judged without one: on 2 busy cores a request sent beside the
# hold at times reaches the frontend seconds later, so the hold may end before the rest reach the
# router (3 holds in 15 on SGLang CPU; 1 round in 15 held twice, none three times:
# design-deviations.md at 7310361). A router that never spreads fails every hold that stays busy.
HOLD_ATTEMPTS = 3


def declared_while_busy(
    scope: CaseScope, served: Served
) -> tuple[list[int], dict[str, float | None], bool]:
    """The requests the case's oracles send while one worker is busy (CaseOracle.sends_while_busy:
    a router's spread): each hold streamed and held open while its rest are sent one after
    another, again where the hold ended first. Their statuses, the workers' request counters
    after them, and whether every hold was still in flight when its rest were answered."""
    statuses: list[int] = []
    held = True
    for oracle in applicable_to_case(scope):
        sends = oracle.sends_while_busy(scope)
        if sends is None:
            continue
        for _ in range(HOLD_ATTEMPTS):
            with served.held_chat(sends.hold) as hold:
                answered = [hold.status]
                answered += [served.post_chat(b, check_roles=False).status_code for b in sends.rest]
                kept = not hold.finished
            if kept or any(status != 200 for status in answered):
                break
        statuses += answered
        held = held and kept
    if not statuses:
        return [], {}, held
    return statuses, served.request_counts(), held


class Served(Protocol):
    """The launch the case loop sends an oracle's declared requests on (topology.Topology)."""

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> Response: ...

    def held_chat(self, body: dict[str, Any]) -> HeldRequest: ...

    def request_counts(self) -> dict[str, float | None]: ...


def tap_dir(topo: Topology[Any]) -> Path | None:
    """Where a launched CPU-tier topology's encoder rows are tapped (plan.encoder_tap_env)."""
    tap = topo.plan.env.get(ENCODER_TAP_ENV) if topo.plan.frontend is None else None
    return Path(tap) if tap else None


def embedding_hits_of(
    before: dict[str, WorkerCounters | None], after: dict[str, WorkerCounters | None]
) -> dict[str, float | None]:
    """How far each worker's embedding-cache hit counter moved (None: /metrics did not answer)."""
    return {
        role: (end.embedding_hits - start.embedding_hits) if start and end else None
        for role, end in after.items()
        for start in [before.get(role)]
    }


def settled_frontend(
    topo: Topology[Any], before: FrontendTally | None, images: bool, routed: bool
) -> FrontendTally | None:
    """How the frontend's histograms moved over a request (it may record just after answering:
    waits until the image-token one moved where `images`, the router's where `routed`), or None
    where they were not read."""
    if before is None:
        return None
    deadline = time.monotonic() + PATH_SETTLE_S
    while True:
        after = topo.frontend_tally()
        if after is None:
            return None
        moved = after.since(before)
        settled = (moved.image.requests or not images) and (moved.router.decisions or not routed)
        if settled or time.monotonic() > deadline:
            return moved
        time.sleep(0.1)


PATH_SETTLE_S = 1.0  # a counter scraped right after the answer may not have moved yet


def settled_path(
    topo: Topology[Any],
    request: RequestSpec,
    before: dict[str, WorkerCounters | None],
    replicas: Sequence[str] = (),
) -> tuple[OracleResult, dict[str, WorkerCounters | None]]:
    """The path check of one request (the roles that served it are the ones its topology and
    media say must) and the counters it settled on (each role's prompt tokens, for the judge)."""
    expected = expected_path(topo.plan.workers, request.media, request.path, replicas)
    deadline = time.monotonic() + PATH_SETTLE_S
    while True:
        after = topo.role_counters()
        result = check_path(expected, requests_of(before), requests_of(after))
        if result.passed or time.monotonic() > deadline:
            return result, after
        time.sleep(0.1)


# A health state the timeline records under a diagnosis's name, as a person reads it while the
# topology is still coming up (it is a verdict only if the phase fails on it).
STATE_WORDS = {
    "no_health_source": "notready, every endpoint ready (no health source yet?)",
    "no_health_server": "started with no system port: /health cannot be polled",
}


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


class TopologyPool:
    """One topology serving cases (a 2-core box cannot run two). A launch failure is remembered
    per signature, so the other cases of that launch fail at once with the same cause."""

    def __init__(
        self,
        warmups_for: WarmupsFor,
        registry: PortRegistry | None = None,
        opener: Opener = launch,
        say: Callable[[str], None] = lambda line: None,
    ):
        self.warmups_for = warmups_for
        self.registry = registry or PortRegistry()
        self.opener = opener
        self.say = say  # progress lines (harness/cases/results.py, Progress)
        self.current: Topology[Any] | None = None
        self._held = contextlib.ExitStack()  # the current topology, entered; closing stops it
        # why each failed launch failed, and its topology (timeline and logs, for evidence)
        self.failed: dict[str, tuple[TopologyFailure, Topology[Any]]] = {}
        self.launched_here = False

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
        topo = self.opener(spec, self.warmups_for(signature), self.registry)
        args = " ".join(topo.plan.args) or "no launcher args"
        self.say(f"launching {spec.name}, {serving(spec)} ({args})")
        topo.timeline.listeners.append(self._relay(spec.name))
        try:
            self._held.enter_context(topo)  # a failed start stops itself
        except TopologyFailure as failure:
            self.failed[signature] = (failure, topo)
            self.say(f"{spec.name} failed to start: {failure.cause.value}")
            raise
        self.say(f"{spec.name} ready in {topo.ready_s or 0:.1f} s")
        self.current = topo
        self.launched_here = True
        return topo

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
