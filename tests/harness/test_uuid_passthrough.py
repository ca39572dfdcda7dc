"""Upstream's uuid pass-through (mm_agg_gemma4-e2b-it_uuid_passthrough) as this suite sends and
judges it: media parts carrying a uuid, the uuid alone, the fills that push it out of vLLM's
encoder cache, the log line, and the case's patched Dynamo. The real run is the serve case
(tests/serve, CPU tier); these are its parts, each broken once."""

from __future__ import annotations

import pytest
import requests
from pydantic import ValidationError

from harness.cases.case import ServeCase
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import PYTHON_ONLY
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.answer import Scope
from harness.oracles.baselines import BaselineStore
from harness.oracles.log_line import LogLine
from harness.oracles.relations import OtherMedia, OtherTransport
from harness.payloads.chat import MediaURLs, fill_bodies, request_body, warmup_bodies
from harness.profiles import RequestSpec, load_profile
from tests.harness.canned import URLS, ProfileJudge

GEMMA4 = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_gemma4-e2b-it.yaml", REPO_ROOT)
CASE = next(c for c in GEMMA4.cases if c.suffix == "uuid_passthrough")
HIT = "Dynamo multimodal embedding cache hit: identifier='dynamo-mm-cache-image-1'"


def image_part(body: dict) -> dict:
    return body["messages"][0]["content"][0]


def test_the_sequence_is_upstreams() -> None:
    fill = image_part(request_body(CASE, URLS))
    assert fill == {"type": "image_url", "image_url": {"url": URLS.image_url}, "uuid": CASE.uuid}
    eviction, alone = CASE.follow_ups
    assert image_part(request_body(eviction, URLS))["uuid"] == "dynamo-mm-cache-image-1-eviction"
    sent = image_part(request_body(alone, URLS))
    assert sent == {"type": "image_url", "image_url": None, "uuid": "dynamo-mm-cache-image-1"}
    assert alone.log_line == HIT


def test_the_model_sees_the_image_the_uuid_was_sent_with() -> None:
    alone = CASE.follow_ups[-1]
    seen = image_part(request_body(alone, URLS, as_model_sees_it=True))
    assert seen["image_url"] == {"url": URLS.image_url}


def test_fills_are_the_image_under_uuids_of_their_own() -> None:
    alone = CASE.follow_ups[-1]
    bodies = fill_bodies(alone, URLS)
    uuids = [image_part(b)["uuid"] for b in bodies]
    assert len(bodies) == alone.encoder_cache_fills == 8
    assert len(set(uuids)) == 8 and CASE.uuid not in uuids
    assert all(image_part(b)["image_url"] == {"url": URLS.image_url} for b in bodies)
    assert all(b["max_tokens"] == 1 for b in bodies)


def test_a_uuid_alone_is_not_warmed_up() -> None:
    assert all(
        part.get("image_url") is not None
        for body in warmup_bodies(["image_uuid", "image_url"], URLS)
        for part in body["messages"][0]["content"]
        if part["type"] == "image_url"
    )


def test_a_twin_never_carries_the_requests_uuid(urls: MediaURLs) -> None:
    """Under the request's uuid a cache would answer the red twin with the green's rows."""
    scope = Scope(CASE, "cpu", GEMMA4)
    for oracle in (OtherMedia(), OtherTransport()):
        (body,) = oracle.sends(scope, urls).values()
        assert "uuid" not in image_part(body)


@pytest.mark.parametrize(
    "fields",
    [
        {"media": ["image_uuid"]},
        {"media": ["image_url"], "encoder_cache_fills": 2},
    ],
)
def test_media_by_uuid_needs_the_uuid(fields: dict) -> None:
    with pytest.raises(ValidationError, match="set uuid"):
        RequestSpec(prompt="x", **fields)


def canned(status: int = 200) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = b'{"choices": [{"message": {"content": "green"}}]}'
    return resp


def test_the_log_line_is_looked_for_in_what_the_roles_logged_while_served() -> None:
    judge = ProfileJudge("cpu", BaselineStore(), "sig", profile=GEMMA4)
    alone = CASE.follow_ups[-1]
    oracle = LogLine()
    assert oracle.applies(Scope(alone, "cpu", GEMMA4))
    assert not oracle.applies(Scope(CASE, "cpu", GEMMA4))
    found = oracle.check(judge.seen(alone, canned(), logged={"worker": f"DEBUG x {HIT}\n"}))
    assert found.passed, found.detail
    missed = oracle.check(judge.seen(alone, canned(), logged={"worker": "DEBUG other\n"}))
    assert not missed.passed and "no role logged" in missed.detail
    assert oracle.cause.value == "cache_miss"


def test_the_case_runs_on_the_installed_dynamo_with_its_patch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_RUNS", str(tmp_path))
    case = ServeCase(GEMMA4, CASE, "cpu")
    source = case.dynamo_under_test
    assert source is not None and (source.root / PYTHON_ONLY).is_file()
    connector = "dynamo/vllm/multimodal_utils/multimodal_embedding_cache_connector.py"
    assert '("cuda", "xpu", "cpu")' in (source.python_dir / connector).read_text()
    assert case.launch_spec.source == source
    assert ServeCase(GEMMA4, CASE, "cpu").dynamo_under_test == source  # built once
    plain = ServeCase(GEMMA4, GEMMA4.cases[0], "cpu")
    assert plain.dynamo_under_test is None
    unpatched = LaunchSpec.of(GEMMA4, "cpu", CASE)
    assert unpatched.signature != case.launch_spec.signature  # never one launch for both
    assert ServeCase(GEMMA4, CASE, "gpu").dynamo_under_test is None


def test_a_request_without_fills_sends_none() -> None:
    assert fill_bodies(RequestSpec(prompt="x", media=["image_url"]), URLS) == []
