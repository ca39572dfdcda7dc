"""The cache-hit oracle (harness/oracles/serving.py) on a real CPU KV-router launch: with the
workers' prefix cache turned off (`--no-enable-prefix-caching`, a real engine flag through the
launcher's VLLM_EXTRA_ARGS), the repeats of the same image request miss, and the case fails with
cause cache_miss naming the request and its hit rate. The passing side is the serve suite's own
mm_agg_router_qwen3-vl-2b."""

from __future__ import annotations

import re

import pytest

from harness.cases.case import CaseRecord, ServeCase, TopologyPool, run_case
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.judge import CaseJudge
from harness.oracles.reference import BaselineStore
from harness.oracles.serving import RequestHit, check_cache_hits
from harness.payloads.chat import MediaURLs, warmup_bodies
from harness.profiles import load_profile

ROUTER = REPO_ROOT / "profiles" / "vllm" / "agg_router_qwen3-vl-2b.yaml"


def test_the_mean_over_the_repeats_is_judged_not_the_first_request() -> None:
    cold, warm, missed = RequestHit(1389, 0, "usage"), RequestHit(1389, 1280, "usage"), None
    held = check_cache_hits([cold, warm, warm], 0.9)
    assert held.passed and held.detail.startswith("repeats hit the prefix cache")
    low = check_cache_hits([cold, warm, RequestHit(1389, 256, "usage")], 0.9)
    assert not low.passed and re.search(r"request 3 hit rate 0.18", low.detail)
    unknown = check_cache_hits([cold, missed, warm], 0.9)
    assert not unknown.passed and re.search(r"request 2 .* no cached-token count", unknown.detail)


@pytest.mark.heavy
@pytest.mark.vllm
@pytest.mark.cpu
def test_a_router_without_prefix_caching_fails_the_cache_hit_oracle(urls: MediaURLs) -> None:
    profile = load_profile(ROUTER, REPO_ROOT)
    profile = profile.model_copy(
        update={"env": {**profile.env, "VLLM_EXTRA_ARGS": "--no-enable-prefix-caching"}}
    )
    case = profile.cases[0]
    assert case.cache_hit is not None
    sc = ServeCase(profile, case, "cpu")
    record = CaseRecord()

    def judge_for(case: ServeCase, topo: object) -> CaseJudge:
        plan = topo.plan  # type: ignore[attr-defined]
        return CaseJudge(profile, "cpu", plan.model, urls, BaselineStore(), plan.signature)

    pool = TopologyPool("cpu", lambda sig: warmup_bodies(["image_url"], urls))
    with pool, pytest.raises(TopologyFailure) as failed:
        run_case(sc, pool, urls, judge_for, record)
    assert failed.value.cause is Cause.CACHE_MISS, failed.value
    message = failed.value.message
    assert re.search(r"request \d hit rate 0\.00; mean over the repeats 0\.00 < 0\.9", message)
    assert re.search(r"request 2: 0/\d+ cached", message), message
