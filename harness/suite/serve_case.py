"""ServeCase: one (profile, case) on a tier, and how it runs against the topology pool."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.core.verdict import Cause, Evidence, TopologyFailure
from harness.judging.cache_hit import RequestHit, judge_cache_hits, request_hit, with_filler
from harness.judging.chat_request import MediaURLs, request_body
from harness.judging.hf_reference import TOP_LOGPROBS
from harness.judging.judge import CaseJudge
from harness.judging.oracles import OracleResult
from harness.judging.path_oracle import check_path, expected_path
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier
from harness.profiles.marks import cadence_marks
from harness.resources.gpu_inventory import GpuInventory
from harness.resources.gpu_leases import GpuUnavailable, shortfall
from harness.resources.memory_plan import plan_memory
from harness.resources.tier import missing_engine
from harness.runtime.generate_counter import WorkerCounters, prompt_tokens_ran, requests_of
from harness.runtime.plan import launch_signature
from harness.runtime.served import ServedTopology
from harness.suite.pool import TopologyPool

XPU_SKIP = (
    "Intel XPU profile: needs an XPU runner (Level Zero devices, vLLM's XPU build); this "
    "harness leases NVIDIA GPUs it finds through NVML"
)


@dataclass(frozen=True)
class ServeCase:
    profile: Profile
    case: CaseSpec
    tier: Tier

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
        if self.tier == "cpu":
            if self.profile.cpu is None:
                return f"GPU tier only: {self.profile.cpu_skip}"
            return f"GPU tier only: {self.case.cpu_skip}" if self.case.cpu_skip else None
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

    @property
    def signature(self) -> str | None:
        if self.profile.tier(self.tier) is None:
            return None
        return launch_signature(self.profile, self.tier, self.case)


@dataclass
class CaseRecord:
    """What one case did, for the results file and the failure report."""

    topology: ServedTopology | None = None
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


def run_case(
    sc: ServeCase, pool: TopologyPool, urls: MediaURLs, judge_for: Any, record: CaseRecord
) -> list[str]:
    """Launch (or reuse) the topology, send every request, judge each answer."""
    try:
        topo = pool.get(sc.profile, sc.case)
    except GpuUnavailable as unavailable:  # the machine changed since collection
        pytest.skip(str(unavailable))
    except TopologyFailure:
        record.topology = pool.topology_for(sc.profile, sc.case)  # evidence of the failed launch
        raise
    record.topology, record.reused = topo, not pool.launched_here
    judge: CaseJudge = judge_for(sc, topo)
    case_start = topo.request_counts()
    hits: list[RequestHit | None] = []
    requests = sc.requests
    for request in requests:
        repeat_of_case = request is requests[0]
        body = request_body(request, urls, TOP_LOGPROBS if sc.tier == "cpu" else None)
        before = topo.role_counters()
        try:
            resp = topo.post_chat(body)
        except TopologyFailure as failure:
            pool.discard(failure)
            raise
        record.answers.append({"status": resp.status_code, "text": resp.text[:2000]})
        path, after = settled_path(topo, request, before, sc.profile.replicas)
        ran = prompt_tokens_ran(before, after) if resp.status_code == 200 else {}
        if sc.case.cache_hit and repeat_of_case and resp.status_code == 200:
            hits.append(request_hit(resp.json().get("usage"), before, after))
        answer = judge.answer(request, body, resp, ran=ran, path=path, send=topo.post_chat)
        if resp.status_code == 200:
            record.answers[-1]["content"] = answer.content
        content_before = judge.content_passed
        try:
            record.checks += judge.judge(answer)
        finally:  # a failing answer's gap is evidence too
            if answer.logprob_gap is not None:
                record.max_logprob_gap = max(record.max_logprob_gap or 0.0, answer.logprob_gap)
        record.verdicts.append((resp.status_code, judge.content_passed - content_before))
    if sc.case.cache_hit and hits:
        record.checks.append(judge_cache_hits(hits, sc.case.cache_hit.min_avg_hit_rate))
    if sc.profile.replicas:
        record.checks.append(judge_spread(topo, case_start))
    return record.checks


SPREAD_REQUESTS = 4  # sent at once: a router that sees load sends some to the idle replica


def judge_spread(topo: ServedTopology, case_start: dict[str, float | None]) -> str:
    """Behind a router, the case's requests reached every replica: 'two workers' is not one.
    Requests sent one after another may all land on one replica (a KV router breaks ties the same
    way when nothing is cached or in flight), so a few distinct ones are sent at once first."""
    bodies = [  # greedy like every request: sampling makes vLLM 0.31-CPU compile its sampler
        {"messages": [{"role": "user", "content": f"Count to {n} in words."}], "max_tokens": 32,
         "temperature": 0.0}
        for n in range(3, 3 + SPREAD_REQUESTS)
    ]  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(max_workers=SPREAD_REQUESTS) as pool:
        answers = list(pool.map(lambda body: topo.post_chat(body, check_roles=False), bodies))
    failed = [a.status_code for a in answers if a.status_code != 200]
    if failed:
        raise TopologyFailure(Cause.HTTP_ERROR, f"concurrent requests answered {failed}",
                              Evidence(phase="request"))  # fmt: skip
    now = topo.request_counts()
    served = {r: (now.get(r) or 0) - (case_start.get(r) or 0) for r in now}
    idle = [role for role, count in served.items() if count < 1]
    detail = ", ".join(f"{role} +{count:g}" for role, count in served.items())
    if idle:
        raise TopologyFailure(
            Cause.WRONG_PATH,
            f"the router sent every request of the case to one worker: {detail}; {idle} "
            "served none (dynamo_component_requests_total)",
            Evidence(phase="request"),
        )
    return f"spread over the replicas: {detail}"


PATH_SETTLE_S = 1.0  # a counter scraped right after the answer may not have moved yet


def settled_path(
    topo: ServedTopology,
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


def judge_path(
    topo: ServedTopology,
    request: RequestSpec,
    before: dict[str, WorkerCounters | None],
    replicas: Sequence[str] = (),
) -> str:
    """The path check of one request, raising wrong_path where it does not hold."""
    result = settled_path(topo, request, before, replicas)[0]
    if not result.passed:
        raise TopologyFailure(Cause.WRONG_PATH, result.detail, Evidence(phase="request"))
    return result.detail


def cadence_cases(profiles: list[Profile], tier: Tier, cadence: str) -> list[ServeCase]:
    """The cases `pytest -m <cadence>` runs on `tier`, in file order, less those no machine
    could run (what `--shard` splits)."""
    cases = [ServeCase(p, c, tier) for p in profiles for c in p.cases]
    return [
        sc
        for sc in cases
        if cadence in cadence_marks(sc.profile, tier, sc.case) and not sc.skip_reason(None)
    ]
