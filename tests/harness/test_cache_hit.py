"""The cache-hit and router-hit oracles (harness/oracles/serving.py), on their figures and on
real CPU KV-router launches with a fault: the workers' prefix cache turned off
(`--no-enable-prefix-caching`, a real engine flag through the launcher's VLLM_EXTRA_ARGS), and a
Qwen2-VL checkpoint whose preprocessor_config.json lacks the keys Dynamo's frontend counts image
tokens from. The passing side is the serve suite's own router ids."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import JudgeSettings
from harness.oracles.serving import RequestHit, check_cache_hits, check_router_hits
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile
from tests.harness.selftest_scope import EXHAUSTIVE


def test_the_mean_over_the_repeats_is_judged_not_the_first_request() -> None:
    cold, warm, missed = RequestHit(1389, 0, "usage"), RequestHit(1389, 1280, "usage"), None
    held = check_cache_hits([cold, warm, warm], 0.9)
    assert held.passed and held.detail.startswith("repeats hit the prefix cache")
    low = check_cache_hits([cold, warm, RequestHit(1389, 256, "usage")], 0.9)
    assert not low.passed and re.search(r"request 3 hit rate 0.18", low.detail)
    unknown = check_cache_hits([cold, missed, warm], 0.9)
    assert not unknown.passed and re.search(r"request 2 .* no cached-token count", unknown.detail)
    # a checkout's min_cached_tokens: each repeat, not the mean
    assert check_cache_hits([cold, warm, warm], 0.9, min_tokens=1280).passed
    few = check_cache_hits([cold, warm, warm], 0.9, min_tokens=1281)
    assert not few.passed and "request 2 (a repeat) had fewer than 1281" in few.detail


def test_the_routers_own_rate_is_judged_beside_the_engines() -> None:
    """The engine served a repeat from cache while the router saw none of its blocks cached:
    router_miss names the divergence; where the engines cached nothing either, the cause is
    the cache's; a repeat the router never recorded fails naming the histogram; the router
    seeing them cached passes."""
    from harness.oracles.serving import blind_repeats

    cold = RequestHit(1402, 0, "usage", 0.0)
    seen, blind = RequestHit(1402, 1280, "usage", 10 / 11), RequestHit(1402, 1280, "usage", 0.0)
    held = check_router_hits([cold, seen, seen], 0.9)
    assert held.passed and "router 0.91, engine 0.91" in held.detail
    missed = RequestHit(1402, 0, "usage", 0.0)
    failed = check_router_hits([cold, missed, blind], 0.9)
    assert not failed.passed and "request 3 was served from the engine's prefix" in failed.detail
    assert blind_repeats([cold, missed, blind], 0.9) == [3]
    assert check_cache_hits([cold, blind, blind], 0.9).passed  # what the engine alone says
    unrouted = check_router_hits([cold, RequestHit(1402, 1280, "usage"), seen], 0.9)
    assert not unrouted.passed and "request 2 (a repeat): the router recorded no" in unrouted.detail
    uncached = check_router_hits([cold, missed, missed], 0.9)
    assert not uncached.passed and "served none of the repeats from cache" in uncached.detail
    assert blind_repeats([cold, missed, missed], 0.9) == []


def without_pixel_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny Qwen2-VL checkpoint as transformers 5 writes it: preprocessor_config.json
    without `min_pixels` / `max_pixels`, so Dynamo's frontend counts the test image to 324
    tokens against the engine's 16 (design-deviations.md at 7310361)."""
    import harness.tiny_models as tiny

    built = tiny.build_tiny_model("qwen2_vl")
    faulty = tmp_path / built.name
    shutil.copytree(built, faulty)
    config = faulty / "preprocessor_config.json"
    data = json.loads(config.read_text())
    del data["min_pixels"], data["max_pixels"]
    config.write_text(json.dumps(data))
    monkeypatch.setattr(tiny, "build_tiny_model", lambda family, cache_dir=None: faulty)


FAULTS = {
    # (profile, fault, its extra launcher env): what each launch breaks
    "prefix caching off": ("agg_router_qwen3-vl-2b", None, "--no-enable-prefix-caching"),
    "router counts the image wrong": ("agg_router_qwen2-vl-2b", without_pixel_bounds, ""),
}


@pytest.mark.heavy
@pytest.mark.vllm
@pytest.mark.cpu
@pytest.mark.parametrize(
    "fault",
    [
        "prefix caching off",
        pytest.param("router counts the image wrong", marks=EXHAUSTIVE),
    ],
)
def test_a_router_case_with_a_fault_fails_naming_it(
    fault: str, urls: MediaURLs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prefix caching off: the repeats miss (cache_miss, request 2 0/N cached). The frontend
    counting the image to other tokens than the engine: the router sees none of the repeats'
    blocks (router 0.00 on every repeat), whichever worker the tie-break sends them to."""
    name, break_it, extra = FAULTS[fault]
    if break_it is not None:
        break_it(tmp_path, monkeypatch)
    profile = load_profile(REPO_ROOT / "profiles" / "vllm" / f"{name}.yaml", REPO_ROOT)
    if extra:
        profile = profile.model_copy(update={"env": {**profile.env, "VLLM_EXTRA_ARGS": extra}})
    case = profile.cases[0]
    assert case.cache_hit is not None
    sc = ServeCase(profile, case, "cpu")
    record = CaseRecord()

    with (
        pytest.raises(TopologyFailure) as failed,
        CaseSession(urls, JudgeSettings(engine_alone=False)) as cases,
    ):
        cases.run(sc, record)
    message = failed.value.message
    if break_it is None:  # nothing cached anywhere: the router saw nothing, nor did the engines
        assert failed.value.cause is Cause.CACHE_MISS, failed.value
        assert "the engines served none of the repeats from cache either" in message
        assert re.search(r"request 2: router 0\.00, engine 0\.00", message), message
    else:  # the engine hit a repeat (the tie-break) that the router saw uncached
        assert failed.value.cause is Cause.ROUTER_MISS, failed.value
        assert re.search(r"request \d was served from the engine's prefix cache", message)
        assert re.search(r"request 2: router 0\.00, .*request 3: router 0\.00", message), message
