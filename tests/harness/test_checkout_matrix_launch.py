"""A checkout of today's upstream, run as its own matrix names it, on the CPU tier: the SGLang agg
launcher upstream renamed (agg_vision.sh, `--model-path`), SGLang P/D with its GPU memory
options, main's SGLang E/P/D whose decode worker has no system port, and the XPU E/P/D launcher
with and without its encode worker's health line. Each runs the checkout's script (never ours),
names the fault in the launcher where there is one, and leaves nothing running or listening."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cases.case import CaseRecord
from harness.cases.session import CaseSession
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.answer import JudgeSettings
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile
from harness.profiles.checkout_matrix import matrix_at
from harness.topology.topology import launch
from tests.harness.dynamo_checkout import build_checkout, write_launcher
from tests.harness.selftest_scope import EXHAUSTIVE
from tests.harness.test_dynamo_src_launch import nothing_left
from tests.harness.test_upstream_shapes import case_of, run_shape
from tests.harness.upstream_shapes import SGLANG_AGG_PATH, XPU_EPD_PATH, xpu_epd

pytestmark = [pytest.mark.heavy, pytest.mark.cpu]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkout(tmp_path_factory.mktemp("co") / "dynamo", shapes=True, matrix=True)


@pytest.fixture
def as_checkout(checkout: Path) -> Path:
    matrix_at.cache_clear()
    return checkout


def matrix_case(profile: str, test_id: str, checkout: Path, urls: MediaURLs) -> list[str]:
    sc = case_of(load_profile(ROOT / profile, ROOT), test_id, checkout)
    assert sc.skip_reason(None) is None, sc.skip_reason(None)
    checks, plan, _ = run_shape(sc, urls)
    assert plan.args[0] == str(sc.launch_spec.script) and sc.launch_spec.choice.origin == "checkout"
    return checks


def test_the_renamed_sglang_agg_runs_the_checkouts_script(
    as_checkout: Path, urls: MediaURLs
) -> None:
    sc = case_of(
        load_profile(ROOT / "profiles/sglang/agg_qwen3-vl-2b.yaml", ROOT),
        "mm_sglang_agg_qwen3-vl-2b",
        as_checkout,
    )
    assert sc.launch_spec.script == as_checkout / SGLANG_AGG_PATH
    assert sc.launch_spec.args[:2] == ("--model-path", "Qwen/Qwen3-VL-2B-Instruct")
    checks = matrix_case("profiles/sglang/agg_qwen3-vl-2b.yaml", sc.test_id, as_checkout, urls)
    assert any(c.startswith("matches the model's own answer") for c in checks), checks


@EXHAUSTIVE
def test_an_xpu_agg_id_upstream_skips_runs_on_the_cpu_tier(
    as_checkout: Path, urls: MediaURLs
) -> None:
    checks = matrix_case(
        "profiles/vllm/agg_xpu_qwen3-vl-2b.yaml", "mm_xpu_agg_qwen3-vl-2b_b64", as_checkout, urls
    )
    assert any(c.startswith("matches the model's own answer") for c in checks), checks


@EXHAUSTIVE
def test_an_xpu_router_id_upstream_skips_runs_on_the_cpu_tier(
    as_checkout: Path, urls: MediaURLs
) -> None:
    checks = matrix_case(
        "profiles/vllm/agg_router_xpu_qwen3-vl-2b.yaml",
        "mm_xpu_agg_router_qwen3-vl-2b",
        as_checkout,
        urls,
    )
    assert any("cache" in c for c in checks), checks


@EXHAUSTIVE
def test_sglang_p_d_with_its_gpu_memory_options(as_checkout: Path, urls: MediaURLs) -> None:
    checks = matrix_case(
        "profiles/sglang/pd_qwen3-vl-2b.yaml", "mm_sglang_pd_qwen3-vl-2b", as_checkout, urls
    )
    assert any(c.startswith("matches the model's own answer") for c in checks), checks


def failure_of(profile: str, test_id: str, checkout: Path) -> tuple[TopologyFailure, LaunchSpec]:
    sc = case_of(load_profile(ROOT / profile, ROOT), test_id, checkout)
    topo = launch(sc.launch_spec)
    ports = list(topo.plan.ports.values())
    with pytest.raises(TopologyFailure) as failure, topo:
        pass
    nothing_left(topo.plan.topology_id, ports)
    return failure.value, sc.launch_spec


def test_a_decode_worker_without_a_system_port_is_named_and_still_judged(
    as_checkout: Path, urls: MediaURLs
) -> None:
    """Upstream main's SGLang E/P/D: decode runs with no system port. The topology serves, the
    answer is judged, and the case fails naming decode and the variable it should have read."""
    sc = case_of(
        load_profile(ROOT / "profiles/sglang/epd_qwen3-vl-2b.yaml", ROOT),
        "multimodal_disagg_qwen",
        as_checkout,
    )
    assert sc.launch_spec.script.name == "multimodal_disagg.sh"
    record = CaseRecord()
    settings = JudgeSettings(cross_topology=False, engine_alone=False)
    with pytest.raises(TopologyFailure) as raised, CaseSession(urls, settings) as cases:
        cases.run(sc, record)
    assert record.topology is not None
    failure = raised.value
    assert failure.cause == Cause.LAUNCHER_INVALID and failure.evidence.role == "decode"
    message = str(failure)
    assert "role 'decode' of multimodal_disagg.sh: the launcher is at fault" in message
    assert "start it with DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT3}" in message
    # judged all the same: the answer's own lines (the path oracle cannot read decode's counters)
    assert "Its answers were judged all the same:" in message
    assert "role 'decode': its /metrics did not answer" in message, message


@EXHAUSTIVE  # the class (an encode worker with no health source) runs in the seed regressions
def test_the_xpu_epd_encode_worker_has_no_health_source(as_checkout: Path) -> None:
    failure, spec = failure_of(
        "profiles/vllm/epd_xpu_qwen3-vl-2b.yaml", "mm_xpu_epd_qwen3-vl-2b", as_checkout
    )
    assert spec.script == as_checkout / XPU_EPD_PATH
    assert failure.cause == Cause.NO_HEALTH_SOURCE and failure.evidence.role == "encode"


@EXHAUSTIVE
def test_the_xpu_epd_with_the_health_line_passes(as_checkout: Path, urls: MediaURLs) -> None:
    write_launcher(as_checkout, xpu_epd(health_source=True), XPU_EPD_PATH)
    try:
        checks = matrix_case(
            "profiles/vllm/epd_xpu_qwen3-vl-2b.yaml", "mm_xpu_epd_qwen3-vl-2b", as_checkout, urls
        )
    finally:
        write_launcher(as_checkout, xpu_epd(health_source=False), XPU_EPD_PATH)
    assert any("known defect encoder-dtype" in c or "encoder-dtype" in c for c in checks), checks
