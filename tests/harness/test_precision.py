"""A family whose CPU kernels take no float32 (Qwen3.5: bfloat16, harness/core/precision.py) runs
in that precision and is held to the model's own answer in the same dtype. Broken on purpose:
the reference judged at float32's precision (its dtype and tolerance) fails the very answer the
shipped one passes; the engine handed float32 fails to start, naming the kernel that refuses it
(a bfloat16 checkpoint run in float32: the CPU causal-conv kernel; a float32 or float16 one: "CPU
GDN attention requires BF16", measured offline 2026-12-05)."""

from __future__ import annotations

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.launch import plan
from harness.oracles import answer
from harness.oracles.answer import JudgeSettings
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

PROFILE = load_profile(REPO_ROOT / "profiles/vllm/agg_qwen3.5-0.8b.yaml", REPO_ROOT)


def judged(urls: MediaURLs, record: CaseRecord) -> list[str]:
    """The Qwen3.5 agg case alone, held to the model (its engine alone off: not this test's)."""
    settings = JudgeSettings(cross_topology=False, relations=False, engine_alone=False)
    with CaseSession(urls, settings) as cases:  # stopped and verified gone, failed or not
        return cases.run(ServeCase(PROFILE, PROFILE.cases[0], "cpu"), record).checks


def test_bfloat16_answers_hold_to_the_model_in_bfloat16_and_not_to_float32s_precision(
    urls: MediaURLs, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = judged(urls, CaseRecord())
    logprobs = next(c for c in checks if c.startswith("log-probabilities: "))
    assert "(tolerance 1.43)" in logprobs, checks
    print(f"\nshipped: {logprobs}")
    # the reference at float32's precision: its dtype, its tolerance, no near-ties
    monkeypatch.setattr(answer, "family_dtype", lambda family: "float32")
    with pytest.raises(TopologyFailure) as wrong:
        judged(urls, CaseRecord())
    assert wrong.value.cause == Cause.WRONG_ANSWER, wrong.value.report()
    assert "differs from the model's own answer" in wrong.value.message
    assert "> 0.0003); the texts agree so far" in wrong.value.message
    print(f"float32's precision: {wrong.value.message[:400]}")


def test_the_engine_in_a_dtype_its_kernels_refuse_fails_naming_them(
    urls: MediaURLs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "family_dtype", lambda family: "float32")
    with pytest.raises(TopologyFailure) as refused:
        judged(urls, CaseRecord())
    report = refused.value.report()
    print(f"\nfloat32 engine: {refused.value.message[:400]}")
    assert refused.value.cause == Cause.ROLE_EXITED, report
    # vLLM 0.31's CPU conv kernel of the Gated DeltaNet layers, first to meet a float32 tensor
    assert ': NotImplementedError: "causal_conv1d_fwd_kernel_impl" not implemented' in (
        refused.value.message
    ), report
