"""The request loop of one case on its launch, and its measuring: send every request, settle
each role's counters, the frontend's tallies and the path, build the `Answer`, judge it, then the
case's answers together (`run_case`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from requests import Response

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.engine_first import answering_roles
from harness.cases.pool import TopologyPool
from harness.core.role_contract import no_port_roles
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import Answer, CaseRun, CaseScope, Scope
from harness.oracles.checks import OracleResult
from harness.oracles.engine_alone import EngineLaunch
from harness.oracles.judge import CaseJudge, Judging
from harness.oracles.model_reference import TOP_LOGPROBS
from harness.oracles.registry import applicable, applicable_to_case
from harness.oracles.serving import RequestHit, check_path, expected_path, request_hit
from harness.payloads.chat import MediaURLs, fill_bodies, request_body
from harness.profiles import RequestSpec
from harness.topology.diagnoses import launcher_name
from harness.topology.measured import Counters, Watch, measure
from harness.topology.observed import RunningTopology
from harness.topology.role_metrics import WorkerCounters, requests_of
from harness.topology.topology import Topology


def run_case(
    sc: ServeCase,
    pool: TopologyPool,
    urls: MediaURLs,
    judging: Judging,
    record: CaseRecord | None = None,
) -> CaseRecord:
    """Launch (or reuse) the topology, send every request, judge each answer: the case's outcome,
    `record` filled (the caller's, so that what a failure leaves is kept: the launch, the answers
    so far). A failure is recorded against the case's requests (others compare with their
    answers) and raised."""
    record = CaseRecord() if record is None else record
    try:
        judged_case(sc, pool, urls, judging, record)
        return record
    except TopologyFailure as failure:
        judging.failed(sc.requests, sc.tier, sc.profile, sc.test_id, failure.cause.value)
        declared = declared_on_checkout(sc, failure)
        if declared is not None:
            raise declared from None
        raise


PATCH_ON_A_COPY = "docs/how-to/test-your-dynamo-branch.md#a-declared-defect-your-checkout-still-has"


def declared_on_checkout(sc: ServeCase, failure: TopologyFailure) -> TopologyFailure | None:
    """Under --dynamo-src, a failure in the words of a defect the case declares a CPU patch for
    (`cpu_dynamo_patch.shows`): the same failure, named as that defect with its patch and how to
    run the case with it on a copy of the checkout. The installed Dynamo runs patched; a
    checkout runs as it is, so a checkout that still has the defect shows it."""
    patch = sc.case.cpu_dynamo_patch
    if sc.source is None or patch is None or patch.shows is None:
        return None
    if not re.search(patch.shows, failure.message):
        return None
    return TopologyFailure(
        failure.cause,
        f"declared upstream defect holds on the checkout ({patch.why}; the harness's patch: "
        f"{patch.file}; to run the case with it on a copy of the checkout: {PATCH_ON_A_COPY}): "
        f"{failure.message}",
        failure.evidence,
    )


def judged_case(
    sc: ServeCase, pool: TopologyPool, urls: MediaURLs, judging: Judging, record: CaseRecord
) -> None:
    try:  # GpuUnavailable (the machine changed since collection) goes up: the caller skips
        topo = pool.get(sc.launch_spec)
    except TopologyFailure:
        record.topology = pool.topology_for(sc.launch_spec)  # evidence of the failed launch
        record.retries = pool.retries.get(sc.launch_spec.signature, [])
        raise
    record.topology, record.reused = topo, not pool.launched_here
    if pool.launched_here:
        record.retries = pool.retries.get(sc.launch_spec.signature, [])
    answering_before = topo.answering_s
    try:
        judge_requests(sc, topo, pool, urls, judging, record)
    except TopologyFailure as failure:
        fault = launcher_fault(topo, f"failed: {failure.message}")
        if fault is not None:
            raise fault from None
        raise
    finally:
        record.served_s = topo.answering_s - answering_before
    fault = launcher_fault(topo, "passed: " + "; ".join(record.checks))
    if fault is not None:
        raise fault


def engine_launch(sc: ServeCase, topo: Topology[Any]) -> EngineLaunch | None:
    """How the engine that answers this launch's requests was started, as the answering role's
    adapter recorded it (engine_first.answering_roles); None where none did (a target)."""
    return EngineLaunch.of_roles(topo.plan.log_dir, answering_roles(sc), sc.profile.stack)


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
    engine = engine_launch(sc, topo) if judging.settings.engine_alone else None
    for request in requests:
        repeat_of_case = request is requests[0]
        scope = Scope(request, sc.tier, sc.profile, judging.settings)
        # the GPU tier asks for them where its engine alone judges the answer
        top_logprobs = TOP_LOGPROBS if sc.tier == "cpu" or engine is not None else None
        body = request_body(request, urls, top_logprobs)
        send_fills(topo, request, urls)
        routed = bool(sc.case.cache_hit and sc.profile.replicas and repeat_of_case)
        replicas = sc.profile.replicas
        expected = expected_path(topo.plan.workers, request.media, request.path, replicas)
        watch = Watch(
            settled=functools.partial(path_settled, expected),
            image_tokens=request.image_token_metrics,
            router=routed,
            logs=request.log_line is not None,
        )
        try:
            seen = measure(topo, body, watch)
        except TopologyFailure as failure:
            pool.discard(failure)
            raise
        resp, frontend = seen.resp, seen.frontend
        record.answers.append({"status": resp.status_code, "text": resp.text[:2000]})
        if sc.case.cache_hit and repeat_of_case and resp.status_code == 200:
            usage = resp.json().get("usage")
            router = frontend.router if frontend else None
            hits.append(request_hit(usage, seen.before, seen.after, router))
        answer = Answer(
            scope,
            body,
            resp,
            model,
            urls,
            judging.baselines,
            signature,
            ran=seen.ran,
            path=path_of(expected, seen.before, seen.after),
            sent=declared_requests(scope, urls, topo),
            tap_dir=seen.tap_dir,
            crossed_before=seen.crossed_before,
            crossed_own=seen.crossed_own,
            image_tokens=frontend.image if frontend and request.image_token_metrics else None,
            model_body=request_body(request, urls, top_logprobs, as_model_sees_it=True)
            if "image_uuid" in request.media
            else None,
            logged=seen.logged,
            engine_launch=engine,
            engines=judging.engines,
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
            if answer.engine_gap is not None:
                record.max_engine_gap = max(record.max_engine_gap or 0.0, answer.engine_gap)
        record.verdicts.append((resp.status_code, judge.content_passed - content_before))
        if judge.unjudged_numerically:
            record.unjudged_numerically.append(judge.unjudged_numerically)
    run = CaseRun(CaseScope(sc.case, sc.tier, sc.profile), case_start, hits)
    if sc.case.embedding_cache_hit:
        run.embedding_hits = embedding_hits_of(case_counters, topo.role_counters())
    run.statuses, run.end_counts, run.hold_in_flight = declared_while_busy(run.scope, topo)
    record.checks += judge.judge_case(run)


def path_of(expected: Mapping[str, int], before: Counters, after: Counters) -> OracleResult:
    """The path check of one request from the workers' counters around it."""
    return check_path(expected, requests_of(before), requests_of(after))


def path_settled(expected: Mapping[str, int], before: Counters, after: Counters) -> bool:
    """The counters settled: every role the request must reach counted it (Watch.settled)."""
    return path_of(expected, before, after).passed


def send_fills(topo: Topology[Any], request: RequestSpec, urls: MediaURLs) -> None:
    """The requests that push the uuid's rows out of the engine's encoder cache before
    `request` (RequestSpec.encoder_cache_fills); one that is not answered 200 fails the case."""
    for n, body in enumerate(fill_bodies(request, urls), 1):
        resp = topo.post_chat(body)
        if resp.status_code != 200:
            raise topo.failure(
                Cause.HTTP_ERROR,
                f"encoder-cache fill {n} of {request.encoder_cache_fills} (uuid "
                f"{body['messages'][0]['content'][0]['uuid']}): HTTP {resp.status_code}: "
                f"{resp.text[:300]}",
            )


def declared_requests(
    scope: Scope, urls: MediaURLs, served: RunningTopology
) -> dict[str, Response]:
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
    scope: CaseScope, served: RunningTopology
) -> tuple[list[int], dict[str, float | None], bool]:
    """The requests the case's oracles send while one worker is busy (CaseOracle.sends_while_busy:
    a router's spread): each hold streamed and held open while its rest are sent one after
    another, again where the hold ended first. Their statuses, the workers' request counters
    after them, and whether every hold was still in flight when its rest were answered."""
    statuses: list[int] = []
    in_flight = True
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
        in_flight = in_flight and kept
    if not statuses:
        return [], {}, in_flight
    return statuses, served.request_counts(), in_flight


def embedding_hits_of(
    before: dict[str, WorkerCounters | None], after: dict[str, WorkerCounters | None]
) -> dict[str, float | None]:
    """How far each worker's embedding-cache hit counter moved (None: /metrics did not answer)."""
    return {
        role: (end.embedding_hits - start.embedding_hits) if start and end else None
        for role, end in after.items()
        for start in [before.get(role)]
    }
