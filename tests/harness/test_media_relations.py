"""Metamorphic media checks. Unit rules, then two real CPU launches broken the way they guard
against: a media server serving another image at one URL, and a tiny checkpoint whose vision
tower is zeroed (it sees nothing, so every image answers alike)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import JudgeSettings, Scope
from harness.oracles.checks import MediaRelation, judge_relation, relations
from harness.oracles.relations import OtherMedia, OtherTransport
from harness.payloads.chat import MediaURLs
from harness.payloads.media import RED_SQUARE_RGB, render_square_png
from harness.profiles import RequestSpec, load_profile

AGG = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)


def test_cpu_relations_swap_media_and_transport(urls: MediaURLs) -> None:
    request = RequestSpec(prompt="Colour?", media=["image_url"])
    other, transport = relations(request, "cpu")
    assert other.same is False and transport.same is True
    assert other.other_media and other.media == ("image_url",)
    assert not transport.other_media and transport.media == ("image_b64",)
    scope = Scope(request, "cpu", AGG)
    swapped = OtherMedia().sends(scope, urls)["other media"]
    assert swapped["messages"][0]["content"][0]["image_url"]["url"].endswith("red_square.png")
    by_b64 = OtherTransport().sends(scope, urls)["other transport"]
    assert by_b64["messages"][0]["content"][0]["image_url"]["url"] == urls.image_b64
    assert relations(RequestSpec(prompt="hi"), "cpu") == []
    assert relations(RequestSpec(prompt="x", media=["image_url_bare"]), "cpu") == []


def test_gpu_relation_names_the_other_colour(urls: MediaURLs) -> None:
    request = RequestSpec(
        prompt="Colour?", media=["image_b64"], gpu={"any_of": ["green"], "alt_any_of": ["red"]}
    )
    (other,) = relations(request, "gpu")
    assert judge_relation(other, "Green.", 200, "Red.").passed
    assert not judge_relation(other, "Green.", 200, "It is not red; it is green.").passed


def test_judging_a_relation() -> None:
    differ = MediaRelation("other media", ("image_url",), True, same=False)
    assert judge_relation(differ, "abc", 200, "abd").passed
    same_answer = judge_relation(differ, "abc", 200, "abc")
    assert not same_answer.passed and "did not reach the model" in same_answer.detail
    twin = MediaRelation("other transport", ("image_b64",), False, same=True)
    assert judge_relation(twin, "abc", 200, "abc").passed
    assert "differs from baseline at char 2" in judge_relation(twin, "abc", 200, "abd").detail
    assert judge_relation(twin, "abc", 500, "").detail == "other transport: HTTP 500, expected 200"


def run_agg_case(urls: MediaURLs) -> TopologyFailure:
    sc = ServeCase(AGG, AGG.cases[0], "cpu")  # an image by URL
    with (
        pytest.raises(TopologyFailure) as failure,
        CaseSession(urls, JudgeSettings(engine_alone=False)) as cases,
    ):
        cases.run(sc)
    return failure.value


@pytest.mark.heavy
def test_a_media_server_serving_another_image_at_the_url_is_caught(urls: MediaURLs) -> None:
    """The URL now serves the red square (same size); the base64 twin still carries green."""
    served = next(p for u, p in urls.files.items() if u == urls.image_url)
    served.write_bytes(render_square_png(RED_SQUARE_RGB, "GREEN"))
    failure = run_agg_case(urls)
    assert failure.cause == Cause.WRONG_ANSWER, failure.report()
    assert failure.message.startswith("other transport: content differs"), failure.message


@pytest.mark.heavy
def test_a_vision_tower_that_sees_nothing_is_caught(
    urls: MediaURLs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import safetensors.torch

    from harness.tiny_models import build_tiny_model

    blind = tmp_path / "qwen3_vl-blind"
    shutil.copytree(build_tiny_model("qwen3_vl"), blind)
    weights = safetensors.torch.load_file(blind / "model.safetensors")
    zeroed = [k for k in weights if ".visual." in f".{k}"]
    assert zeroed, sorted(weights)[:5]
    for key in zeroed:
        weights[key].zero_()
    safetensors.torch.save_file(weights, blind / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setattr("harness.topology.topology.model_for", lambda profile, tier: str(blind))
    failure = run_agg_case(urls)
    assert failure.cause == Cause.WRONG_ANSWER, failure.report()
    assert failure.message.startswith("other media: the same answer for the other image/video")
