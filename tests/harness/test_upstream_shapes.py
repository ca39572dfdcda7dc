"""Upstream's launcher shapes, run unmodified from a checkout in upstream's layout on the CPU tier
(tests/harness/upstream_shapes.py): whatever way a launcher computes a worker's ports (a loop
with indirect expansion, offsets from a base, the unindexed DYN_SYSTEM_PORT, a worker in the
foreground, SGLang E/PD with no embedding transfer mode), each role is named and its ports known
from what it received at exec, and the case passes every oracle. The checkout's Python runs in
every role, and nothing is left running or listening."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER, DynamoSource
from harness.launch.plan import LaunchPlan
from harness.oracles.answer import JudgeSettings
from harness.payloads.chat import MediaURLs
from harness.profiles import Profile, load_profile
from tests.harness.dynamo_checkout import PROBE, build_checkout

pytestmark = [pytest.mark.heavy, pytest.mark.cpu]

CHECKOUT_EPD = "tests/harness/profiles/checkout/epd_qwen3-vl-2b.yaml"
# (shape, profile, case id): one image-URL id per launcher shape. Upstream's E/PD shape runs in
# test_validate_checkout.py (its seed table: as upstream ships it, and with the health line).
SHAPES = [
    ("agg_unindexed_foreground", "profiles/vllm/agg_qwen3-vl-2b.yaml", "mm_agg_qwen3-vl-2b"),
    ("vllm_router_loop", "profiles/vllm/agg_router_qwen3-vl-2b.yaml", "mm_agg_router_qwen3-vl-2b"),
    ("vllm_epd_role_vars", CHECKOUT_EPD, "mm_epd_qwen3-vl-2b"),
    ("vllm_p_d_dyn_port", "profiles/vllm/p_d_qwen3-vl-2b.yaml", "mm_p_d_qwen3-vl-2b"),
    ("sglang_e_pd", "profiles/sglang/e_pd_qwen3-vl-2b.yaml", "multimodal_e_pd_qwen"),
    (
        "sglang_router_loop",
        "profiles/sglang/agg_router_qwen3-vl-2b.yaml",
        "mm_sglang_agg_router_qwen3-vl-2b",
    ),
]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One checkout for every shape: E/P/D in upstream main's per-role-variable contract."""
    return build_checkout(
        tmp_path_factory.mktemp("co") / "dynamo", contract="role_vars", shapes=True
    )


@pytest.fixture
def as_checkout(checkout: Path) -> Path:
    return checkout


def case_of(profile: Profile, test_id: str, checkout: Path) -> ServeCase:
    """The case as a session under `--dynamo-src checkout` runs it."""
    case = next(c for c in profile.cases if profile.test_id(c) == test_id)
    return ServeCase(profile, case, "cpu", DynamoSource(checkout.resolve()))


def run_shape(sc: ServeCase, urls: MediaURLs) -> tuple[list[str], LaunchPlan, dict[str, dict]]:
    """The case judged by every oracle but the cross-topology one (no baseline launch here);
    (checks, its plan, each role's adapter record)."""

    settings = JudgeSettings(cross_topology=False, engine_alone=False)
    with CaseSession(urls, settings) as cases:  # stopped and verified gone on the way out
        checks = cases.run(sc).checks
    plan = cases.launched[-1]
    assert plan.launcher == CHECKOUT_LAUNCHER  # the checkout's own launcher ran
    records = [json.loads(p.read_text()) for p in plan.log_dir.glob("*.adapter.json")]
    return checks, plan, {r["role"]: r for r in records}


@pytest.mark.parametrize(("shape", "profile_path", "test_id"), SHAPES, ids=[s[0] for s in SHAPES])
def test_an_upstream_launcher_shape_runs_unmodified(
    shape: str, profile_path: str, test_id: str, as_checkout: Path, urls: MediaURLs
) -> None:
    profile = load_profile(REPO_ROOT / profile_path, REPO_ROOT)
    sc = case_of(profile, test_id, as_checkout)
    assert sc.skip_reason(None) is None, sc.skip_reason(None)
    checks, plan, records = run_shape(sc, urls)
    assert any(c.startswith("matches the model's own answer: identical") for c in checks), checks
    for role in profile.worker_roles:  # named by the leased system port it was started with
        assert records[role.name]["ports"]["DYN_SYSTEM_PORT"] == plan.ports[role.health_port or ""]
    for role in [r.name for r in profile.worker_roles] + ["frontend"]:  # the checkout's Python
        package = "frontend" if role == "frontend" else profile.stack.removeprefix("dynamo-")
        assert (
            PROBE.format(package=f"dynamo.{package}") in (plan.log_dir / f"{role}.log").read_text()
        )
    check_shape(shape, records)


def check_shape(shape: str, records: dict[str, dict]) -> None:
    """What each shape's own pattern must have come out as."""
    notes = {role: "; ".join(r["rewrites"]) for role, r in records.items()}
    if shape.endswith("router_loop"):
        kv = [records[w]["ports"].get("--kv-events-config") for w in ("worker1", "worker2")]
        if shape.startswith("vllm"):  # $((DYN_VLLM_KV_EVENT_PORT + i - 1)), moved to ipc://
            assert all("-> ipc://" in notes[w] for w in ("worker1", "worker2")), notes
        else:  # $((KV_EVENTS_PORT_BASE + i - 1)): consecutive leased ports
            assert kv[1] == kv[0] + 1, kv
        assert "--http-port" in records["frontend"]["ports"]
    if shape == "sglang_e_pd":
        for role in ("encode", "pd"):
            assert "DYN_SGL_EMBEDDING_TRANSFER_MODE=local" in notes[role], notes
            assert "added --nccl-port" in notes[role], notes
    if shape == "vllm_epd_role_vars":
        assert "kv_buffer_device -> cpu" in notes["encode"] and "-> ipc://" in notes["encode"]
        # the launcher's default is LLaVA; `--model` (as upstream's tests pass it) chose Qwen3-VL
        assert "--model Qwen/Qwen3-VL-2B-Instruct -> the tiny checkpoint" in notes["encode"]
    if shape == "vllm_p_d_dyn_port":
        assert all(
            "VLLM_NIXL_SIDE_CHANNEL_PORT" in records[r]["ports"] for r in ("prefill", "decode")
        )
