"""The user's Dynamo as the system under test, for real on the CPU tier: a checkout in upstream's
layout (tests/harness/dynamo_checkout.py) whose own E/P/D launcher runs unmodified through the
role adapter in place of ours. (a) the checkout's change runs in every role, in upstream main's
port contract (per-role variables, LLaVA as the launcher's default model); (b) its encode worker
without a health source fails no_health_source naming encode and passes with one:
test_validate_checkout.py runs both sides in both contracts; (c) a flag the CPU tier cannot map,
and a role that starts another model than the profile's, are refused, naming the role; (d) nothing
is left running or listening after any of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.markers import TOPOLOGY_ID_ENV
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.judging.baselines import BaselineStore
from harness.judging.chat_request import MediaURLs, warmup_bodies
from harness.judging.judge import CaseJudge
from harness.profiles import load_profile
from harness.runtime.dynamo_src import DYNAMO_SRC_ENV, import_records
from harness.runtime.launch import launch
from harness.runtime.listeners import listening_ports
from harness.runtime.processes import marked_processes
from harness.suite.pool import TopologyPool
from harness.suite.serve_case import CaseRecord, ServeCase, run_case
from tests.harness.dynamo_checkout import PROBE, build_checkout

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

PROFILE = load_profile(REPO_ROOT / "tests" / "harness" / "profiles" / "checkout" /
                       "epd_qwen3-vl-2b.yaml", REPO_ROOT)  # fmt: skip


def nothing_left(topology_id: str, ports: list[int]) -> None:
    assert marked_processes(TOPOLOGY_ID_ENV, topology_id) == []
    assert listening_ports(ports) == []


def launch_failure(monkeypatch: pytest.MonkeyPatch, checkout: Path) -> TopologyFailure:
    monkeypatch.setenv(DYNAMO_SRC_ENV, str(checkout))
    topo = launch(PROFILE, "cpu", PROFILE.cases[0])
    ports = list(topo.plan.ports.values())
    with pytest.raises(TopologyFailure) as failure, topo:
        pass
    nothing_left(topo.plan.topology_id, ports)
    return failure.value


def test_the_checkouts_launcher_and_code_run_in_every_role(
    tmp_path: Path, urls: MediaURLs, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = build_checkout(tmp_path / "dynamo", contract="role_vars")
    monkeypatch.setenv(DYNAMO_SRC_ENV, str(checkout))
    sc = ServeCase(PROFILE, PROFILE.cases[0], "cpu")
    assert sc.skip_reason(None) is None
    record = CaseRecord()

    def judge_for(case: ServeCase, topo: object) -> CaseJudge:
        plan = topo.plan  # type: ignore[attr-defined]
        return CaseJudge(PROFILE, "cpu", plan.model, urls, BaselineStore(), plan.signature)

    with TopologyPool("cpu", lambda sig: warmup_bodies(["image_url"], urls)) as pool:
        checks = run_case(sc, pool, urls, judge_for, record)
        topo = pool.current
        assert topo is not None
        plan, logs = topo.plan, topo.plan.log_dir
    nothing_left(plan.topology_id, list(plan.ports.values()))
    assert any(c.startswith("matches the model's own answer: identical") for c in checks), checks
    assert "path encode +1, prefill +1, decode +1" in checks
    for role, package in [("frontend", "frontend"), ("encode", "vllm"), ("prefill", "vllm"),
                          ("decode", "vllm")]:  # fmt: skip
        assert PROBE.format(package=f"dynamo.{package}") in (logs / f"{role}.log").read_text()
    records = import_records(logs)
    workers = [r for r in records.values() if "dynamo.vllm" in r]
    assert len(workers) >= 3 and all(str(checkout) in r["dynamo.vllm"] for r in workers)
    rewrites = (logs / "encode.adapter.json").read_text()
    assert "kv_buffer_device -> cpu" in rewrites and "-> ipc://" in rewrites
    # the launcher's default is LLaVA; `--model` (as upstream's tests pass it) chose Qwen3-VL
    assert "--model Qwen/Qwen3-VL-2B-Instruct -> the tiny checkpoint" in rewrites


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"encode_extra": "--quantization fp8"}, "cannot run it: --quantization fp8"),
        # never a silent swap: the encode worker hard-codes LLaVA, whatever `--model` said
        ({"encode_model": "llava-hf/llava-1.5-7b-hf"},
         "starts model 'llava-hf/llava-1.5-7b-hf', not 'Qwen/Qwen3-VL-2B-Instruct', the model of "
         "profile epd_qwen3-vl-2b"),
    ],
    ids=["unmapped_flag", "another_model"],
)  # fmt: skip
def test_a_role_the_tier_cannot_run_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, str], named: str
) -> None:
    failure = launch_failure(monkeypatch, build_checkout(tmp_path / "dynamo", **change))
    assert failure.cause == Cause.LAUNCHER_INVALID, failure.report()
    assert failure.evidence.role == "encode"
    assert named in failure.message
