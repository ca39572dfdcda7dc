"""Request bodies, cross-topology fingerprints and the judge, on hand-built responses."""

import json

import pytest
import requests

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import JudgeSettings, Scope
from harness.oracles.answer_shape import PromptTokens
from harness.oracles.baselines import BaselineStore
from harness.oracles.checks import check_prompt_tokens
from harness.payloads.chat import chat_body, warmup_bodies
from harness.profiles import RequestSpec, Tier, load_profiles
from harness.topology.health import HealthSample
from tests.harness.canned import URLS, ProfileJudge

PROFILES = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}


def response(status: int, body: dict) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = json.dumps(body).encode()
    return resp


def answer(content: str, prompt_tokens: int = 10) -> dict:
    return {
        "choices": [{"message": {"content": content}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 3},
    }


def test_chat_body_puts_media_before_text_at_temperature_zero() -> None:
    body = chat_body("What?", ["image_b64", "video_url"], 7, URLS)
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "video_url", "text"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert body["temperature"] == 0.0 and body["max_tokens"] == 7


def test_fingerprint_treats_url_and_base64_as_same_media() -> None:
    a = RequestSpec(prompt="p", media=["image_url"])
    b = RequestSpec(prompt="p", media=["image_b64"])
    c = RequestSpec(prompt="p", media=["video_url"])
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_malformed_media_kinds_build_the_mistake_they_name() -> None:
    bare, missing = chat_body("What?", ["image_url_bare", "image_url_missing"], 7, URLS)[
        "messages"
    ][0]["content"][:2]
    assert bare == {"type": "image_url", "image_url": "http://127.0.0.1:1/i.png"}
    assert missing == {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/missing.png"}}


def test_warmups_cover_each_media_kind_once() -> None:
    bodies = warmup_bodies(["image_url", "image_url", "video_b64", "image_url_bare"], URLS)
    kinds = [[p["type"] for p in b["messages"][0]["content"]] for b in bodies]
    assert kinds == [["text"], ["image_url", "text"], ["video_url", "text"]]
    media_only = warmup_bodies(["image_url"], URLS, text=False)
    assert [[p["type"] for p in b["messages"][0]["content"]] for b in media_only] == [
        ["image_url", "text"]
    ]


def judge_for(profile: str, tier: Tier, store: BaselineStore, signature: str) -> ProfileJudge:
    """A judge of canned answers: no checkpoint behind them, so no model's answer to compare,
    and no launch to send media twins to."""
    return ProfileJudge(
        tier,
        store,
        signature,
        JudgeSettings(model_answer=False, relations=False, frontend_metrics=False),
        profile=PROFILES[profile],
    )


def verdict(judge: ProfileJudge, request: RequestSpec, resp: requests.Response) -> list[str]:
    """The judge on a canned answer (no launch: no path, no twins to send)."""
    return judge.judge(judge.seen(request, resp))


def test_gpu_judge_keywords_pass_and_fail() -> None:
    request = PROFILES["agg_qwen3-vl-2b"].cases[0]
    judge = judge_for("agg_qwen3-vl-2b", "gpu", BaselineStore(), "s")
    assert verdict(judge, request, response(200, answer("It is Green.")))
    with pytest.raises(TopologyFailure) as err:
        verdict(judge, request, response(200, answer("It is red.")))
    assert err.value.cause == Cause.WRONG_ANSWER


def test_status_mismatch_is_http_error_or_wrong_answer() -> None:
    judge = judge_for("agg_llava-1.5-7b", "gpu", BaselineStore(), "s")
    ok_case, refused_case = (
        PROFILES["agg_llava-1.5-7b"].cases[0],
        PROFILES["agg_llava-1.5-7b"].cases[2],
    )
    with pytest.raises(TopologyFailure) as err:
        verdict(judge, ok_case, response(500, {"message": "boom"}))
    assert err.value.cause == Cause.HTTP_ERROR and "500" in err.value.message
    with pytest.raises(TopologyFailure) as err:
        verdict(judge, refused_case, response(200, answer("a triangle")))
    assert err.value.cause == Cause.WRONG_ANSWER
    assert verdict(judge, refused_case, response(400, {"message": "Bad Request"}))


@pytest.mark.parametrize("tier", ["gpu", "cpu"])
def test_refusal_must_say_why_on_both_tiers(tier: Tier) -> None:
    bad = next(c for c in PROFILES["epd_qwen3-vl-2b"].cases if c.suffix == "bad_input")
    judge = judge_for("epd_qwen3-vl-2b", tier, BaselineStore(), "s")
    deserialize = "data did not match any variant of untagged enum ChatCompletionRequest…"
    assert verdict(judge, bad, response(400, {"message": deserialize}))
    with pytest.raises(TopologyFailure) as err:
        verdict(judge, bad, response(400, {"message": "Bad Request"}))
    assert err.value.cause == Cause.WRONG_ANSWER and "error body lacks" in err.value.message


def test_cross_topology_equality_needs_a_different_launch() -> None:
    store = BaselineStore()
    e_pd = PROFILES["e_pd_qwen3-vl-2b"]
    plain, b64 = e_pd.cases[0], e_pd.cases[1]  # b64 case: same_as e_pd (another launch)
    nocount = plain.model_copy(  # records the e_pd baseline (judged against nothing itself)
        update={"cpu": plain.cpu.model_copy(update={"prompt_tokens": False, "same_as": None})}
    )
    b64 = b64.model_copy(update={"cpu": b64.cpu.model_copy(update={"prompt_tokens": False})})
    verdict(
        judge_for("e_pd_qwen3-vl-2b", "cpu", store, "sig-plain"),
        nocount,
        response(200, answer("xyz")),
    )
    same = judge_for("e_pd_qwen3-vl-2b", "cpu", store, "sig-fd")
    assert any("same as e_pd" in c for c in verdict(same, b64, response(200, answer("xyz"))))
    with pytest.raises(TopologyFailure, match=r"differ|first difference|!="):
        verdict(
            judge_for("e_pd_qwen3-vl-2b", "cpu", store, "sig-fd2"),
            b64,
            response(200, answer("xyQ")),
        )
    # The baseline recorded by the same launch is not a baseline: that check could not fail.
    lone = BaselineStore()
    line = next(
        c
        for c in verdict(
            judge_for("e_pd_qwen3-vl-2b", "cpu", lone, "sig-fd"), b64, response(200, answer("a"))
        )
        if c.startswith("same as")
    )
    assert line == (
        "same as e_pd: not judged: baseline e_pd of qwen3-vl-2b (dynamo-vllm) was not run in "
        "this session"
    )


def test_a_baseline_that_was_not_run_is_not_judged_and_one_that_ran_elsewhere_is() -> None:
    """No launch of the baseline's topology this session: "not judged", naming it, never a
    wrong answer. One ran but answered another request: the profiles disagree, which fails."""
    e_pd = PROFILES["e_pd_qwen3-vl-2b"]
    b64 = e_pd.cases[1]
    b64 = b64.model_copy(update={"cpu": b64.cpu.model_copy(update={"prompt_tokens": False})})
    store = BaselineStore()
    judge = judge_for("e_pd_qwen3-vl-2b", "cpu", store, "sig-fd")
    line = next(c for c in verdict(judge, b64, response(200, answer("a"))) if "same as" in c)
    assert "not judged: baseline e_pd of qwen3-vl-2b (dynamo-vllm) was not run" in line
    assert judge.content_passed == 0  # it vouched for nothing
    other = BaselineStore()
    other.record(("dynamo-vllm", "qwen3-vl-2b", "e_pd", "another request"), "sig-plain", "x")
    with pytest.raises(TopologyFailure, match="ran in this session but recorded no answer"):
        judge = judge_for("e_pd_qwen3-vl-2b", "cpu", other, "sig-fd")
        verdict(judge, b64, response(200, answer("a")))


def test_a_case_whose_baseline_failed_is_not_judged_against_it() -> None:
    """The baseline's case failed (here at launch): the comparison is not judged, says which case
    failed and why, and vouches for nothing; the case's own oracles still decide it."""
    store = BaselineStore()
    e_pd = PROFILES["e_pd_qwen3-vl-2b"]
    plain, b64 = e_pd.cases[0], e_pd.cases[1]
    b64 = b64.model_copy(update={"cpu": b64.cpu.model_copy(update={"prompt_tokens": False})})
    judge = judge_for("e_pd_qwen3-vl-2b", "cpu", store, "sig-fd")
    key = Scope(plain, "cpu", e_pd).key()
    store.record_failure(key, "mm_e_pd_qwen3-vl-2b", "no_health_source")
    lines = verdict(judge, b64, response(200, answer("xyz")))
    line = next(c for c in lines if c.startswith("same as e_pd"))
    assert (
        line == "same as e_pd: not judged: baseline mm_e_pd_qwen3-vl-2b failed (no_health_source)"
    )
    assert judge.content_passed == 0  # nothing read the content and vouched
    # an answer it recorded before failing is no baseline either
    store.record(key, "sig-plain", "xyz")
    assert "not judged" in next(
        c for c in verdict(judge, b64, response(200, answer("Q"))) if "same" in c
    )


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (503, '{"status":"notready","endpoints":{"generate":"ready"}}', True),
        (503, '{"status":"notready","endpoints":{}}', False),
        (503, '{"status":"notready","endpoints":{"generate":"notready"}}', False),
        (200, '{"status":"ready","endpoints":{"generate":"ready"}}', False),
        (503, "not json", False),
    ],
)
def test_no_health_source_signature(status: int, body: str, expected: bool) -> None:
    assert HealthSample("notready", status, body).no_health_source is expected


def test_a_declared_defect_must_show_and_names_itself_when_strict() -> None:
    """A declared defect's oracle must fail (its line names the defect); once it passes, the case
    fails (remove the declaration); with --strict-defects its failure names the root cause."""
    case = PROFILES["e_pd_llava-1.5-7b"].cases[0]
    (defect,) = case.cpu.defects
    assert "prompt_tokens" in defect.oracles
    judge = judge_for("e_pd_llava-1.5-7b", "cpu", BaselineStore(), "s")
    seen = judge.seen(case, response(200, answer("x", prompt_tokens=115)))
    shows = check_prompt_tokens(answer("x", prompt_tokens=115), 114)
    line = judge.line_of(seen, PromptTokens(), shows)
    assert line.startswith("upstream defect llava-encoder-feature-layer holds: prompt_tokens 115")
    gone = check_prompt_tokens(answer("x", prompt_tokens=114), 114)
    with pytest.raises(TopologyFailure, match="it no longer shows; remove the known_defect"):
        judge.line_of(seen, PromptTokens(), gone)
    strict = judge_for("e_pd_llava-1.5-7b", "cpu", BaselineStore(), "s")
    strict.settings = JudgeSettings(model_answer=False, relations=False, excuse_defects=False)
    seen = strict.seen(case, response(200, answer("x", prompt_tokens=115)))
    with pytest.raises(TopologyFailure) as named:
        strict.line_of(seen, PromptTokens(), shows)
    assert "encode_utils.py encode_image_embeddings() computes" in named.value.message
    assert named.value.message.endswith(
        "(docs/explanation/upstream-defects.md#llava-encoder-feature-layer)]"
    )
    assert strict.line_of(seen, PromptTokens(), gone) == "prompt_tokens 114 == expected 114"
    undeclared = PROFILES["e_pd_qwen3-vl-2b"].cases[0]
    other = judge.seen(undeclared, response(200, answer("x")))
    with pytest.raises(TopologyFailure, match="prompt_tokens 115 != expected 114"):
        judge.line_of(other, PromptTokens(), shows)


def test_the_verdict_follows_the_data_flow_and_names_every_failing_oracle() -> None:
    """The E/P/D encoder bypassed (the prefill worker encodes the image itself, in float32): the
    path names encode (wrong_path), the declared encoder-dtype defect does not show and says so
    without advising its own removal, and the logprobs line is listed, not the cause."""
    from harness.oracles.base import Oracle
    from harness.oracles.checks import OracleResult
    from harness.oracles.model_answer import LogProbs
    from harness.oracles.roles_served import RolesServed

    case = PROFILES["epd_qwen3-vl-2b"].cases[0]
    judge = judge_for("epd_qwen3-vl-2b", "cpu", BaselineStore(), "s")
    seen = judge.seen(case, response(200, answer("x", prompt_tokens=62)))
    path = OracleResult(False, "role 'encode' did not serve it: expected +1")
    numbers = OracleResult(True, "log-probabilities: 73 tokens, largest |gap| 2.64e-05")
    failed: list[tuple[Oracle, TopologyFailure]] = []
    for oracle, result in [(LogProbs(), numbers), (RolesServed(), path)]:  # in the registry's order
        with pytest.raises(TopologyFailure) as err:
            judge.line_of(seen, oracle, result)
        failed.append((oracle, err.value))
    failure = judge.verdict(seen, failed)
    assert failure.cause == Cause.WRONG_PATH, failure.message
    assert failure.message.startswith("role 'encode' did not serve it"), failure.message
    assert "also failing: [log-probabilities] " in failure.message
    assert "upstream defect encoder-dtype" in failure.message
    assert "remove the known_defect" not in failure.message
    assert "an earlier stage failed (not a reason to remove it)" in failure.message


def test_the_image_token_metric_must_count_the_request() -> None:
    """The frontend's own image-token histogram: one image-bearing request recorded, with its
    tokens; a request it did not record (0, or two) fails naming the metric."""
    from harness.oracles.answer_shape import ImageTokens
    from harness.topology.role_metrics import ImageTokenTally, parse_frontend

    case = PROFILES["agg_qwen3-vl-2b"].cases[0]
    assert case.image_token_metrics
    judge = judge_for("agg_qwen3-vl-2b", "gpu", BaselineStore(), "s")
    judge.settings = JudgeSettings(model_answer=False, relations=False)  # as a launch has it
    seen = judge.seen(case, response(200, answer("green")))
    assert ImageTokens().applies(seen.scope)
    seen.image_tokens = ImageTokenTally(1, 256)
    assert ImageTokens().check(seen).passed
    for moved in (ImageTokenTally(0, 0), ImageTokenTally(2, 512)):
        seen.image_tokens = moved
        result = ImageTokens().check(seen)
        assert (
            not result.passed and "dynamo_frontend_image_tokens_per_request_count" in result.detail
        )
    text = 'dynamo_frontend_image_tokens_per_request_sum{model="m"} 16\n# HELP x\n'
    assert parse_frontend(text).image == ImageTokenTally(0, 16)


def test_a_media_twin_refused_is_an_http_error() -> None:
    """The other transport's twin answering 500 names an HTTP error, not a wrong answer."""
    from harness.oracles.relations import OtherTransport

    case = PROFILES["agg_qwen3-vl-2b"].cases[0]
    judge = judge_for("agg_qwen3-vl-2b", "cpu", BaselineStore(), "s")
    twin = {"other transport": response(500, {"message": "boom"})}
    seen = judge.seen(case, response(200, answer("x")), sent=twin)
    oracle = OtherTransport()
    assert oracle.applies(Scope(case, "cpu", PROFILES["agg_qwen3-vl-2b"]))
    with pytest.raises(TopologyFailure) as failure:
        judge.line_of(seen, oracle, oracle.check(seen))
    assert failure.value.cause == Cause.HTTP_ERROR
    assert "other transport: HTTP 500, expected 200" in failure.value.message


def test_the_embedding_cache_hit_must_move_the_encoders_counter() -> None:
    """The repeats' media come from the encoder's embedding cache: its hit counter moved at least
    once per repeat; where no worker's moved (no cache, or missed), the case fails cache_miss."""
    from harness.oracles.answer import CaseRun, CaseScope
    from harness.oracles.case_oracles import EmbeddingCacheHit

    profile = PROFILES["sglang_e_pd_qwen3-vl-2b"]
    case = next(c for c in profile.cases if c.id == "multimodal_e_pd_fd_qwen")
    scope = CaseScope(case, "cpu", profile)
    oracle = EmbeddingCacheHit()
    assert oracle.applies(scope) and oracle.cause == Cause.CACHE_MISS
    hit = CaseRun(scope, {}, embedding_hits={"encode": 1.0, "pd": 0.0})
    assert oracle.check(hit).passed
    missed = CaseRun(scope, {}, embedding_hits={"encode": 0.0, "pd": None})
    result = oracle.check(missed)
    assert not result.passed and "no worker" in result.detail
