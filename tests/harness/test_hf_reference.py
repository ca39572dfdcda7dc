"""The model's own answer (HF transformers on the raw media), computed outside Dynamo and vLLM,
then a real CPU E/PD whose encode worker runs other vision weights than its PD worker: every
other oracle passes (the answer depends on the image, the token counts agree), the reference
does not, and the failure names the encode worker's embeddings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import JudgeSettings
from harness.oracles.model_reference import reference_answer
from harness.payloads.chat import MediaURLs, chat_body
from harness.profiles import load_profile
from harness.tiny_models import build_tiny_model


def test_the_reference_is_deterministic_and_sees_the_image(urls: MediaURLs) -> None:
    model_dir = build_tiny_model("qwen3_vl")
    green = chat_body("Colour?", ["image_url"], 16, urls)
    red = chat_body("Colour?", ["image_url"], 16, urls.other)
    first = reference_answer(model_dir, green, urls.fetch, "float32")
    assert first == reference_answer(model_dir, green, urls.fetch, "float32")
    assert first != reference_answer(model_dir, red, urls.fetch, "float32")


@pytest.mark.heavy
@pytest.mark.vllm
def test_an_encode_worker_on_other_weights_is_caught_by_the_reference(
    urls: MediaURLs, tmp_path: Path
) -> None:
    """The encoder's checkpoint has its vision tower perturbed; E/PD still answers, its answers
    still depend on the image, its token counts are right; the encoder's own rows tell, first in
    the data flow, and the model's answer on those rows traces the departure to them."""
    import safetensors.torch
    import torch

    other = tmp_path / "qwen-other-weights"
    shutil.copytree(build_tiny_model("qwen3_vl"), other)
    weights = safetensors.torch.load_file(other / "model.safetensors")
    generator = torch.Generator().manual_seed(1)
    for key in [k for k in weights if ".visual." in k and weights[k].is_floating_point()]:
        weights[key] += 0.2 * torch.randn(weights[key].shape, generator=generator)
    safetensors.torch.save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    script = tmp_path / "launchers" / "vllm" / "disagg_multimodal_e_pd.sh"
    text = script.read_text()
    # the role adapter gives the encode role this checkpoint for the profile's --model
    encode = "start_role encode python3"
    assert text.count(encode) == 1
    script.write_text(text.replace(encode, f'HARNESS_CPU_MODEL="{other}" {encode}'))
    shipped = load_profile(REPO_ROOT / "profiles" / "vllm" / "e_pd_qwen3-vl-2b.yaml", REPO_ROOT)
    profile = shipped.model_copy(update={"launcher": str(script)})
    case = profile.cases[0].model_copy(  # judged alone: no agg launch in this test
        update={"cpu": profile.cases[0].cpu.model_copy(update={"same_as": None})}
    )
    sc = ServeCase(profile, case, "cpu")
    with (
        pytest.raises(TopologyFailure) as failure,
        CaseSession(urls, JudgeSettings(engine_alone=False)) as cases,
    ):
        cases.run(sc)
    assert failure.value.cause == Cause.WRONG_ANSWER, failure.value.report()
    message = failure.value.message
    # the earliest stage that departs names it: the encoder's own rows, against what the
    # declaration says the encoder computes; the answer's departure follows, traced to them
    assert message.startswith("encoder rows: upstream defect encoder-dtype does not reproduce"), (
        message
    )
    assert "the declaration is wrong, or a second fault sits on top of it" in message
    assert "also failing: [matches the model's own answer]" in message
    assert "media tokens agree" in message
    assert "the encoder's own rows give this answer: the departure is the encoder's" in message
