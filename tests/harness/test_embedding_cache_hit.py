"""The embedding-cache-hit oracle (harness/oracles/case_oracles.py EmbeddingCacheHit) on a real
SGLang E/PD launch on the CPU tier: upstream's multimodal_e_pd_fd_qwen sends the same base64
image twice through an encode worker with a 1 GB embedding cache, and the second is served from
it (Dynamo's own dynamo_component_embedding_cache_hits_total moves on encode). Launched without
the cache flag (the fault: a launcher that drops it, so every repeat is encoded again), the
counter stays put and the case fails cache_miss naming the counter. The passing side is the
serve suite's own multimodal_e_pd_fd_qwen."""

from __future__ import annotations

import pytest

from harness.cases.case import ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles.answer import JudgeSettings
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile
from tests.harness.selftest_scope import EXHAUSTIVE

E_PD = REPO_ROOT / "profiles" / "sglang" / "e_pd_qwen3-vl-2b.yaml"

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.sglang,
    pytest.mark.cpu,
    EXHAUSTIVE,  # 163 s of SGLang E/PD; the other oracles' fault tests cover the class
]


def test_repeats_without_the_encoders_cache_fail_naming_the_counter(urls: MediaURLs) -> None:
    profile = load_profile(E_PD, REPO_ROOT)
    case = next(c for c in profile.cases if c.id == "multimodal_e_pd_fd_qwen")
    assert case.embedding_cache_hit
    assert "--multimodal-embedding-cache-capacity-gb" in case.launcher_args
    assert case.cpu is not None
    uncached = case.model_copy(
        update={
            "launcher_args": ["--frontend-decoding"],
            # judged by its own oracles here: the agg baseline is another profile's launch
            "cpu": case.cpu.model_copy(update={"same_as": None}),
        }
    )
    profile = profile.model_copy(update={"cases": [uncached]})
    sc = ServeCase(profile, uncached, "cpu")

    with (
        pytest.raises(TopologyFailure) as failed,
        CaseSession(urls, JudgeSettings(engine_alone=False)) as cases,
    ):
        cases.run(sc)
    assert failed.value.cause is Cause.CACHE_MISS, failed.value.report()
    message = failed.value.message
    assert "embedding cache hits over the case: no worker" in message, message
    assert "dynamo_component_embedding_cache_hits_total" in message, message
    assert "1 repeat(s) expected" in message, message
