"""LaunchPlan resolution: pure, every port passed as env, markers set, secrets redacted."""

import dataclasses
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import LaunchPlan, resolve
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier, load_profiles

PROFILES = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}


def plan_for(
    profile: Profile, tier: Tier = "cpu", case_index: int = 0, env: dict[str, str] | None = None
) -> LaunchPlan:
    spec = LaunchSpec.of(profile, tier, profile.cases[case_index])
    ports = {name: 21000 + i for i, name in enumerate(spec.port_contract.names)}
    return resolve(
        spec,
        ports=ports,
        run_dir=Path("/runs/x"),
        scratch_dir=Path("/tmp/harness-x"),
        model="/models/tiny",
        topology_id="topo1",
        marker_env={"HARNESS_TOPOLOGY_ID": "topo1"},
        base_env=env if env is not None else {"PATH": "/usr/bin", "HF_TOKEN": "hf_secretvalue"},
    )


def test_epd_plan_passes_every_port_and_role() -> None:
    plan = plan_for(PROFILES["epd_qwen3-vl-2b"])
    names = ["DYN_HTTP_PORT", "DYN_SYSTEM_PORT1", "DYN_SYSTEM_PORT2", "DYN_SYSTEM_PORT3"]
    names += ["VLLM_NIXL_SIDE_CHANNEL_PORT_ENCODE", "VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL"]
    names += ["VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE", "VLLM_ZMQ_PORT_DECODE", "ZMQ_XSUB_PORT"]
    for name in names:
        assert plan.env[name] == str(plan.ports[name])
    assert [r.name for r in plan.workers] == ["encode", "prefill", "decode"]
    assert (
        plan.role("encode").health_url
        == f"http://127.0.0.1:{plan.ports['DYN_SYSTEM_PORT1']}/health"
    )
    assert plan.env["HARNESS_MANAGED_PORTS"] == "1"
    assert plan.env["HARNESS_DEVICE"] == "cpu"
    assert plan.env["DYN_FILE_KV"] == "/tmp/harness-x/discovery"
    assert plan.frontend_url.startswith("http://127.0.0.1:")
    assert plan.served_model_name == "Qwen/Qwen3-VL-2B-Instruct-FP8"


def test_scratch_paths_fit_unix_socket_limit() -> None:
    plan = plan_for(PROFILES["epd_qwen3-vl-2b"])
    # vLLM binds ipc://$VLLM_RPC_BASE_PATH/<uuid4>: the socket path must stay under 107 bytes.
    assert len(plan.env["VLLM_RPC_BASE_PATH"]) + 1 + 36 < 107


def test_describe_redacts_secrets() -> None:
    plan = plan_for(PROFILES["agg_qwen3-vl-2b"], env={"PATH": "/bin", "HARNESS_API_KEY": "k-123"})
    described = plan.describe()
    env = described["env"]
    assert isinstance(env, dict)
    assert env["HARNESS_API_KEY"] == "***"
    assert "k-123" not in repr(described)


def test_signature_shared_across_profiles_and_split_by_launcher_args() -> None:
    epd, video = PROFILES["epd_qwen3-vl-2b"], PROFILES["epd_video_qwen3-vl-2b"]
    plain, decoding = epd.cases[0], epd.cases[1]

    def signature(profile: Profile, tier: Tier, case: CaseSpec) -> str:
        return LaunchSpec.of(profile, tier, case).signature

    assert signature(epd, "cpu", plain) == signature(video, "cpu", video.cases[0])
    assert signature(epd, "cpu", plain) != signature(epd, "cpu", decoding)
    assert signature(epd, "cpu", plain) != signature(epd, "gpu", plain)


def test_gpu_tier_uses_layout_args() -> None:
    plan = plan_for(PROFILES["epd_qwen3-vl-2b"], tier="gpu", case_index=1)
    assert plan.args == (
        "--model",
        "Qwen/Qwen3-VL-2B-Instruct-FP8",
        "--single-gpu",
        "--frontend-decoding",
    )
    assert plan.env["HARNESS_DEVICE"] == "gpu"


def test_missing_port_is_an_error() -> None:
    profile = PROFILES["agg_qwen3-vl-2b"]
    with pytest.raises(ValueError, match="no port leased"):
        resolve(
            LaunchSpec.of(profile, "cpu", profile.cases[0]),
            ports={},
            run_dir=Path("/r"),
            scratch_dir=Path("/s"),
            model="m",
            topology_id="t",
            marker_env={},
        )


def test_a_launch_spec_carries_no_case_request_or_profile() -> None:
    """Everything below the case loop reads the launch, not the profile's cases or expectations."""
    epd = PROFILES["epd_qwen3-vl-2b"]
    spec = LaunchSpec.of(epd, "cpu", epd.cases[1])
    values = [getattr(spec, f.name) for f in dataclasses.fields(spec)]
    values += [v for v in values if isinstance(v, tuple) for v in v]
    assert not [v for v in values if isinstance(v, Profile | RequestSpec)]
    assert spec.args[-1] == "--frontend-decoding"  # the case's layout, as plain arguments
    gpu_only = epd.model_copy(update={"cpu": None, "cpu_skip": "a GPU-only profile"})
    with pytest.raises(ValueError, match=r"epd_qwen3-vl-2b\.yaml: .* has no cpu tier"):
        LaunchSpec.of(gpu_only, "cpu", gpu_only.cases[0])


def test_an_xpu_launcher_is_handed_the_device_list_it_asks_for_on_the_cpu_tier() -> None:
    """Upstream's XPU router launcher refuses fewer devices than it needs before starting a
    role ("ZE_AFFINITY_MASK must have at least 2 comma-separated values (got 0)"): on the CPU
    tier it gets one per device of the profile's layout; a CUDA profile gets none."""
    assert plan_for(PROFILES["agg_router_xpu_qwen3-vl-2b"]).env["ZE_AFFINITY_MASK"] == "0,1"
    assert plan_for(PROFILES["agg_xpu_qwen3-vl-2b"]).env["ZE_AFFINITY_MASK"] == "0"
    assert "ZE_AFFINITY_MASK" not in plan_for(PROFILES["agg_router_qwen3-vl-2b"]).env
