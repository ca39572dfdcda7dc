"""The path oracle: which roles must serve a request, checked against their own counters.

Unit rules first; then a real CPU E/PD whose PD worker no longer routes media to its encoder
(a launcher copy without --route-to-encoder) answers every image request, and fails wrong_path.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.cases.loop import HOLD_ATTEMPTS, declared_while_busy, path_of, path_settled
from harness.core.paths import REPO_ROOT, cache_dir
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import RolePlan
from harness.oracles.answer import CaseRun, CaseScope
from harness.oracles.baselines import BaselineStore
from harness.oracles.case_oracles import SPREAD_REQUESTS
from harness.oracles.judge import CaseJudge
from harness.oracles.registry import applicable_to_case
from harness.oracles.serving import RequestHit, check_path, expected_path
from harness.payloads.chat import MediaURLs, request_body, warmup_bodies
from harness.payloads.media import AssetServer, build_media
from harness.profiles import load_profile
from harness.topology.held_request import HeldRequest
from harness.topology.measured import Watch, measure
from harness.topology.observed import RunningTopology
from harness.topology.role_metrics import parse_counters
from harness.topology.topology import launch

EPD = (
    RolePlan("encode", "worker", 1, "encode"),
    RolePlan("prefill", "worker", 2, "prefill"),
    RolePlan("decode", "worker", 3, "backend"),
)


@pytest.mark.parametrize(
    ("media", "encode"),
    [
        ([], 0),
        (["image_url"], 1),
        (["image_b64"], 1),
        (["video_url"], 0),
        (["video_b64"], 0),
        (["image_url", "video_url"], 1),
    ],
)
def test_encode_takes_exactly_the_requests_with_an_image(media: list[str], encode: int) -> None:
    """Measured on a CPU E/P/D, E/PD and LLaVA E/P/D (every 200 answer followed this rule)."""
    assert expected_path(EPD, media) == {"encode": encode, "prefill": 1, "decode": 1}


def test_overrides_and_the_check_name_the_role_and_counter() -> None:
    assert expected_path(EPD, ["image_url"], {"encode": 0})["encode"] == 0
    ok = check_path(
        {"encode": 1, "decode": 1}, {"encode": 3, "decode": 7}, {"encode": 4, "decode": 8}
    )
    assert ok.passed and ok.detail == "path encode +1, decode +1"
    skipped = check_path(
        {"encode": 1, "decode": 1}, {"encode": 3, "decode": 7}, {"encode": 3, "decode": 8}
    )
    assert not skipped.passed
    assert skipped.detail == (
        "role 'encode' did not serve it: dynamo_component_requests_total"
        '{dynamo_endpoint="generate"} 3 -> 3, expected +1'
    )
    extra = check_path({"encode": 0}, {"encode": 0}, {"encode": 1})
    assert "role 'encode' served it" in extra.detail
    silent = check_path({"encode": 1}, {"encode": None}, {"encode": 1})
    assert "its /metrics did not answer" in silent.detail


def test_the_counter_is_read_from_prometheus_text() -> None:
    text = (
        "# TYPE dynamo_component_requests_total counter\n"
        'dynamo_component_requests_total{dynamo_component="prefill",dynamo_endpoint="generate"} 4\n'
        'dynamo_component_requests_total{dynamo_component="prefill",'
        'dynamo_endpoint="clear_kv_blocks"} 9\n'
    )
    assert parse_counters(text).requests == 4.0
    assert parse_counters("").requests == 0.0


@pytest.mark.heavy
@pytest.mark.vllm
def test_an_e_pd_that_stops_using_its_encoder_fails_wrong_path(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    script = tmp_path / "launchers" / "vllm" / "disagg_multimodal_e_pd.sh"
    text = script.read_text()
    assert text.count("--route-to-encoder ") == 1
    script.write_text(text.replace("--route-to-encoder ", ""))
    shipped = load_profile(REPO_ROOT / "profiles" / "vllm" / "e_pd_qwen3-vl-2b.yaml", REPO_ROOT)
    profile = shipped.model_copy(update={"launcher": str(script)})
    case = profile.cases[0]  # an image by URL
    media = build_media(cache_dir() / "media")
    with AssetServer(media.green_square_png.parent) as server:
        urls = MediaURLs.serve(server, media)
        with launch(LaunchSpec.of(profile, "cpu", case), warmup_bodies([], urls)) as topo:
            expected = expected_path(topo.plan.workers, case.media, case.path)
            watch = Watch(functools.partial(path_settled, expected))
            seen = measure(topo, request_body(case, urls), watch)
            assert seen.resp.status_code == 200  # the answer alone looks fine
            path = path_of(expected, seen.before, seen.after)
    assert not path.passed
    assert path.detail.startswith("role 'encode' did not serve it")


class RouterThatNeverSpreadsDouble(RunningTopology):
    """TEST DOUBLE for a topology whose router sends every request to worker1: no real component
    here can be made to do that on demand (Dynamo 1.6.1's frontend routes across namespaces, so
    isolating a worker that way does not hold, measured)."""

    def __init__(self) -> None:
        self.counts = {"worker1": 0.0, "worker2": 0.0}

    def request_counts(self) -> dict[str, float | None]:
        return dict(self.counts)

    def post_chat(
        self, body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response:
        self.counts["worker1"] += 1
        answer = requests.Response()
        answer.status_code = 200
        return answer

    def held_chat(self, body: dict[str, Any]) -> HeldRequest:
        self.counts["worker1"] += 1
        self.holds += 1
        return HeldDouble(finished=self.holds <= self.holds_ending_first)

    holds = 0
    holds_ending_first = 0  # this many holds end before the requests beside them are answered


class HeldDouble(HeldRequest):
    """TEST DOUBLE for a held request: in flight until closed unless `finished`."""

    def __init__(self, finished: bool) -> None:
        self.status = 200
        self._finished = finished

    @property
    def finished(self) -> bool:
        return self._finished

    def __enter__(self) -> HeldDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_router_that_never_spreads_fails_wrong_path() -> None:
    profile = load_profile(
        REPO_ROOT / "profiles" / "vllm" / "agg_router_qwen3-vl-2b.yaml", REPO_ROOT
    )
    topo = RouterThatNeverSpreadsDouble()
    scope = CaseScope(profile.cases[0], "cpu", profile)
    assert [o.name for o in applicable_to_case(scope)] == ["router hit", "cache hit", "spread"]
    # the cache checks hold: the engine and the router saw the repeat cached
    hits: list[RequestHit | None] = [
        RequestHit(100, 0, "usage", 0.0),
        RequestHit(100, 100, "usage", 1.0),
    ]
    judge = CaseJudge("cpu", BaselineStore(), "s")
    run = CaseRun(scope, topo.request_counts(), hits)
    run.statuses, run.end_counts, run.hold_in_flight = declared_while_busy(scope, topo)
    assert run.statuses == [200] * (1 + SPREAD_REQUESTS) and run.hold_in_flight
    with pytest.raises(TopologyFailure) as failure:
        judge.judge_case(run)
    assert failure.value.cause == Cause.WRONG_PATH
    assert failure.value.message.startswith(
        "the router sent every request of the case to one worker: worker1 +4, worker2 +0"
    )


def spread_scope() -> CaseScope:
    profile = load_profile(
        REPO_ROOT / "profiles" / "sglang" / "agg_router_qwen3-vl-2b.yaml", REPO_ROOT
    )
    return CaseScope(profile.cases[0], "cpu", profile)


def test_a_hold_that_ended_first_is_held_again() -> None:
    topo = RouterThatNeverSpreadsDouble()
    topo.holds_ending_first = 1
    statuses, _, held = declared_while_busy(spread_scope(), topo)
    assert topo.holds == 2 and held
    assert statuses == [200] * (1 + SPREAD_REQUESTS)  # the round that held


def test_a_spread_judged_after_holds_that_all_ended_first_says_so() -> None:
    topo = RouterThatNeverSpreadsDouble()
    topo.holds_ending_first = HOLD_ATTEMPTS
    scope = spread_scope()
    run = CaseRun(scope, topo.request_counts(), [])
    run.statuses, run.end_counts, run.hold_in_flight = declared_while_busy(scope, topo)
    assert topo.holds == HOLD_ATTEMPTS and not run.hold_in_flight
    spread = next(o for o in applicable_to_case(scope) if o.name == "spread")
    result = spread.check(run)
    assert not result.passed
    assert result.detail.endswith("the held request ended before the others were answered")


def test_a_spread_whose_requests_were_refused_is_an_http_error() -> None:
    """Requests sent beside the hold that did not answer 200 name an HTTP error, not the path."""
    profile = load_profile(
        REPO_ROOT / "profiles" / "vllm" / "agg_router_qwen3-vl-2b.yaml", REPO_ROOT
    )
    topo = RouterThatNeverSpreadsDouble()
    hits: list[RequestHit | None] = [  # the cache checks hold
        RequestHit(100, 0, "usage", 0.0),
        RequestHit(100, 100, "usage", 1.0),
    ]
    run = CaseRun(CaseScope(profile.cases[0], "cpu", profile), topo.request_counts(), hits)
    run.statuses, run.end_counts = [200, 200, 503, 200], topo.request_counts()
    judge = CaseJudge("cpu", BaselineStore(), "s")
    with pytest.raises(TopologyFailure) as failure:
        judge.judge_case(run)
    assert failure.value.cause == Cause.HTTP_ERROR
    assert "answered [503]" in failure.value.message
