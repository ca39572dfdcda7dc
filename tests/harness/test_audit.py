"""`python -m harness audit`: shipped profiles pass; broken launcher copies are caught."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.audit.runner import audit
from harness.core.paths import REPO_ROOT
from harness.profiles.load import raw_profile

PROFILES = sorted((REPO_ROOT / "profiles").rglob("*.yaml"))
ENDPOINT_HEALTH_LINE = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='[\"generate\"]'"


def _copy(tmp_path: Path, profile: str, launcher: str, edit: list[str]) -> Path:
    """Copy launchers/ to tmp_path, sed-edit one launcher, point a profile copy at it."""
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    target = tmp_path / "launchers" / launcher
    for expr in edit:
        subprocess.run(["sed", "-i", expr, str(target)], check=True)
    raw = raw_profile(REPO_ROOT / "profiles" / profile)
    raw["launcher"] = str(target)
    copy = tmp_path / Path(profile).name
    copy.write_text(yaml.safe_dump(raw))
    return copy


def _lines(profile: Path) -> list[str]:
    return [f.line() for f in audit([profile]).findings]


def test_shipped_profiles_pass() -> None:
    result = audit(PROFILES)
    assert [f.line() for f in result.findings] == []
    assert len(result.launches) >= len(PROFILES)


def test_cli_exit_code_and_summary() -> None:
    profile = REPO_ROOT / "profiles/sglang/epd_qwen3-vl-2b.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "audit", str(profile)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 finding(s)" in proc.stdout


def test_encode_without_endpoint_health_is_flagged(tmp_path: Path) -> None:
    """The seed bug: dynamo.vllm's encode worker registers no payload -> /health 503 forever."""
    profile = _copy(
        tmp_path,
        "vllm/epd_qwen3-vl-2b.yaml",
        "vllm/disagg_multimodal_epd.sh",
        [
            "s/^DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS=.* \\\\$//",
            "/DYN_SYSTEM_USE_ENDPOINT_HEALTH/d",
        ],
    )
    text = (tmp_path / "launchers/vllm/disagg_multimodal_epd.sh").read_text()
    assert "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS" not in text
    lines = _lines(profile)
    health = [ln for ln in lines if "[encode]" in ln and "/health stays 503" in ln]
    assert health, lines
    assert ENDPOINT_HEALTH_LINE in health[0]
    assert all("[encode]" in ln for ln in lines), lines  # nothing else broke


def test_sglang_encode_needs_no_env(tmp_path: Path) -> None:
    """dynamo.sglang's encode worker sets its own health after registering (installed source)."""
    from harness.audit.health_checks import encode_sets_own_health

    assert encode_sets_own_health("dynamo.sglang")
    assert not encode_sets_own_health("dynamo.vllm")


def test_hard_coded_port_is_flagged(tmp_path: Path) -> None:
    profile = _copy(
        tmp_path,
        "sglang/agg_qwen3-vl-2b.yaml",
        "sglang/agg_multimodal.sh",
        ['s/"$(port SGLANG_NCCL_PORT1 29501)"/29501/'],
    )
    lines = _lines(profile)
    assert any(
        "[worker] the role adapter refuses it: would bind port 29501 (--nccl-port), which "
        "nobody leased" in ln
        for ln in lines
    ), lines


def test_a_health_port_the_launcher_does_not_hand_out_is_a_finding_not_a_refusal(
    tmp_path: Path,
) -> None:
    """A profile whose worker's health port is not the one its launcher hands the worker loads
    (the launcher's text is no verdict, and the harness polls the port the role was started
    with); the audit names the mismatch from what the role received."""
    profile = _copy(tmp_path, "vllm/agg_qwen3-vl-2b.yaml", "vllm/agg_multimodal.sh", [])
    profile.write_text(profile.read_text().replace("DYN_SYSTEM_PORT1", "DYN_SYSTEM_PORT7"))
    lines = _lines(profile)
    assert any(
        "[worker] started with DYN_SYSTEM_PORT=" in ln
        and "(DYN_SYSTEM_PORT1), the profile names DYN_SYSTEM_PORT7=" in ln
        for ln in lines
    ), lines


def test_a_port_the_launcher_writes_as_a_number_is_named(tmp_path: Path) -> None:
    """A port with no variable to move it cannot be leased: the audit names it and its text."""
    profile = _copy(
        tmp_path,
        "vllm/epd_qwen3-vl-2b.yaml",
        "vllm/disagg_multimodal_epd.sh",
        ["s/[$](port VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE 20099)/20099/"],
    )
    lines = _lines(profile)
    assert any(
        "binds port 20099 (VLLM_NIXL_SIDE_CHANNEL_PORT=20099) with no variable" in ln
        for ln in lines
    ), lines


def test_shared_port_is_flagged(tmp_path: Path) -> None:
    profile = _copy(
        tmp_path,
        "vllm/epd_qwen3-vl-2b.yaml",
        "vllm/disagg_multimodal_epd.sh",
        ["s/VLLM_NIXL_SIDE_CHANNEL_PORT_DECODE 20099/VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL 20098/"],
    )
    lines = _lines(profile)
    want = "[decode,prefill] roles share port VLLM_NIXL_SIDE_CHANNEL_PORT_PREFILL"
    assert any(want in ln for ln in lines), lines


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        ("s/--tp-size 1/--tp-sise 1/", "unrecognized arguments: --tp-sise"),
        ("s/transfer-backend nixl/transfer-backend nixel/", "invalid choice: 'nixel'"),
        (
            's/--skip-tokenizer-init "${FRONTEND/--dedicated-mm-encoder &/',
            "--dedicated-mm-encoder is for PD/P/D workers",
        ),
    ],
)
def test_bad_sglang_flags_are_flagged(tmp_path: Path, edit: str, expect: str) -> None:
    profile = _copy(
        tmp_path, "sglang/epd_qwen3-vl-2b.yaml", "sglang/disagg_multimodal_epd.sh", [edit]
    )
    lines = _lines(profile)
    assert any("dynamo.sglang rejects its args" in ln and expect in ln for ln in lines), lines


def test_served_model_name_mismatch_is_flagged(tmp_path: Path) -> None:
    profile = _copy(
        tmp_path,
        "vllm/agg_qwen3-vl-2b.yaml",
        "vllm/agg_multimodal.sh",
        ["s/--enable-multimodal/--enable-multimodal --served-model-name other/"],
    )
    lines = _lines(profile)
    assert any("[worker] registers as 'other'" in ln for ln in lines), lines


@pytest.mark.parametrize(
    ("profile", "launcher"),
    [
        ("vllm/agg_router_qwen3-vl-2b.yaml", "vllm/agg_multimodal_router.sh"),
        ("sglang/agg_router_qwen3-vl-2b.yaml", "sglang/agg_multimodal_router.sh"),
    ],
)
def test_workers_blocks_the_kv_router_does_not_hash_by_are_refused(
    tmp_path: Path, profile: str, launcher: str
) -> None:
    """The CPU tier gives the frontend and the workers its own block size: without this check a
    launcher whose router and workers disagree would pass here and miss every block on a GPU."""
    edit = r's/--kv-cache-block-size \("\$BLOCK"\|16\)/--kv-cache-block-size 32/'
    copied = _copy(tmp_path, profile, launcher, [edit])
    lines = _lines(copied)
    assert any("the router would find none of them" in ln for ln in lines), lines


def test_sglang_workers_map_to_the_cpu_tier_and_pd_moves_kv_over_nixl(tmp_path: Path) -> None:
    """The role adapter, the one place that knows the tier, runs an SGLang worker on the CPU
    tier with the SGLang venv's python and SGLang's CPU backend (page size dropped: the paged
    allocator is a GPU kernel); prefill/decode disaggregation moves KV over NIXL (whatever
    backend the launcher named), the decode worker without the CUDA-pinned host pool; a missing
    SGLang venv is refused by name."""
    from harness.core.role_contract import SGLANG_PYTHON_ENV
    from harness.launch.role_adapter import Refused, adapt

    python = tmp_path / "python"
    python.touch()
    env = {
        "HARNESS_DEVICE": "cpu",
        "HARNESS_ROLE": "worker",
        "HARNESS_PROFILE_MODEL": "m",
        "HARNESS_CPU_MODEL": "/tiny",
        SGLANG_PYTHON_ENV: str(python),
    }
    launcher_args = "--model-path m --page-size 16 --tp-size 1 --mem-fraction-static 0.8"
    out = adapt(["-m", "dynamo.sglang", *launcher_args.split(), "--skip-tokenizer-init"], env)
    assert out.python == str(python)
    args = out.argv[2:]
    assert args[:2] == ["--model-path", "/tiny"]
    assert "--page-size" not in args and "--mem-fraction-static" not in args
    assert args[args.index("--device") + 1] == "cpu"
    assert args[args.index("--attention-backend") + 1] == "torch_native"
    assert args[args.index("--dtype") + 1] == "float32"
    assert out.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert "--sleep-on-idle" in args and out.env["TORCH_COMPILE_DISABLE"] == "1"
    disagg = ["-m", "dynamo.sglang", "--model-path", "m", "--disaggregation-mode"]
    mooncake = ["--disaggregation-transfer-backend", "mooncake"]
    decode = adapt([*disagg, "decode", *mooncake], env).argv
    assert decode[decode.index("--disaggregation-transfer-backend") + 1] == "nixl"
    assert decode[decode.index("--disaggregation-decode-retraction-backup") + 1] == "cpu_tensor"
    prefill = adapt([*disagg, "prefill"], env).argv
    assert prefill[prefill.index("--disaggregation-transfer-backend") + 1] == "nixl"
    assert "--disaggregation-decode-retraction-backup" not in prefill
    agg = adapt(
        ["-m", "dynamo.sglang", "--model-path", "m"], {**env, "HARNESS_SGLANG_SLEEP_ON_IDLE": "0"}
    )
    assert "--sleep-on-idle" not in agg.argv and "--disaggregation-transfer-backend" not in agg.argv
    with pytest.raises(Refused, match=r"SGLang venv is not installed"):
        adapt(["-m", "dynamo.sglang", "--model-path", "m"], {**env, SGLANG_PYTHON_ENV: "/none"})


def test_a_wide_port_the_launcher_does_not_read_is_named(tmp_path: Path) -> None:
    """A `wide_ports` entry that names no port variable of the launcher and no role exempts
    nothing: the audit names it (the listener it meant is still held to loopback)."""
    raw = raw_profile(REPO_ROOT / "profiles" / "sglang/agg_qwen3-vl-2b.yaml")
    raw["launcher"] = str(REPO_ROOT / raw["launcher"])
    raw["wide_ports"] = {"SGLANG_NCCL_PORT9": raw["wide_ports"]["SGLANG_NCCL_PORT1"]}
    copy = tmp_path / "agg_qwen3-vl-2b.yaml"
    copy.write_text(yaml.safe_dump(raw))
    lines = _lines(copy)
    assert any("[profile] wide_ports names SGLANG_NCCL_PORT9" in ln for ln in lines), lines


def _with_gpu(tmp_path: Path, profile: str, **gpu: object) -> Path:
    """A copy of a shipped profile with GPU-tier fields changed (its launcher stays shipped)."""
    raw = raw_profile(REPO_ROOT / "profiles" / profile)
    raw["gpu"].update(gpu)
    raw["launcher"] = str(REPO_ROOT / raw["launcher"])
    copy = tmp_path / Path(profile).name
    copy.write_text(yaml.safe_dump(raw))
    return copy


def test_an_oversized_role_fails_the_audit_naming_it(tmp_path: Path) -> None:
    lines = _lines(_with_gpu(tmp_path, "vllm/agg_qwen3-vl-2b.yaml", max_model_len=65536))
    (fit,) = [ln for ln in lines if "card" in ln]
    assert "[worker] GPU #0: worker need 31.72 GiB > 24.00 GiB card" in fit
    assert "KV 14.00" in fit and "claim a larger gpu.card_gib" in fit
    assert lines == [fit], lines  # the launcher still passes the plan's bytes, vLLM accepts them


def test_a_launcher_starving_the_kv_cache_is_refused_by_vllms_own_check(tmp_path: Path) -> None:
    """A launcher's own KV cache below one 4096-token request never reaches vLLM on the GPU tier:
    the role adapter gives each role its planned bytes for the launcher's flag, so vLLM's own
    start-up check (which the audit runs on every GPU role) finds nothing to refuse."""
    profile = _copy(
        tmp_path,
        "vllm/agg_qwen3-vl-2b.yaml",
        "vllm/agg_multimodal.sh",
        ["s/--enable-multimodal/--enable-multimodal --kv-cache-memory-bytes 400000000/"],
    )
    lines = _lines(profile)
    assert not [ln for ln in lines if "vLLM's own start-up check refuses it" in ln], lines
    assert not [ln for ln in lines if "400000000" in ln], lines


def test_a_role_on_another_gpu_than_the_profile_places_it_is_named(tmp_path: Path) -> None:
    raw = yaml.safe_load((REPO_ROOT / "profiles/vllm/e_pd_llava-1.5-7b.yaml").read_text())
    raw["launcher"] = str(REPO_ROOT / raw["launcher"])
    raw["roles"][1]["gpu"]["device"] = 0  # pd said to share GPU #0; the launcher gives it #1
    copy = tmp_path / "e_pd.yaml"
    copy.write_text(yaml.safe_dump(raw))
    lines = _lines(copy)
    assert any(
        "[pd] the profile places it on GPU #0 (CUDA_VISIBLE_DEVICES=10), the launcher's layout "
        "gives it CUDA_VISIBLE_DEVICES=11" in ln
        for ln in lines
    ), lines


def test_a_gpu_position_past_the_lease_is_refused() -> None:
    """A layout that needs more GPUs than leased: the role adapter refuses the role, naming it,
    instead of starting it on no device (or the machine's GPU of that number)."""
    from harness.launch.role_adapter import Refused, adapt

    env = {
        "HARNESS_DEVICE": "gpu",
        "HARNESS_ROLE": "pd",
        "HARNESS_LEASED_GPUS": "3",
        "CUDA_VISIBLE_DEVICES": "1",
        "HARNESS_PROFILE_MODEL": "m",
    }
    with pytest.raises(Refused, match="GPU position 1, but the harness leased 1 position"):
        adapt(["-m", "dynamo.vllm", "--model", "m"], env)
    ok = adapt(["-m", "dynamo.vllm", "--model", "m"], {**env, "CUDA_VISIBLE_DEVICES": "0"})
    assert ok.env["CUDA_VISIBLE_DEVICES"] == "3"


def test_the_xpu_launch_selects_devices_by_ze_affinity_mask(tmp_path: Path) -> None:
    from harness.audit.capture import plan_for, run_launcher
    from harness.profiles import load_profile

    profile = load_profile(REPO_ROOT / "profiles/vllm/epd_xpu_qwen3-vl-2b.yaml", REPO_ROOT)
    cap = run_launcher(plan_for(profile, "gpu", profile.cases[0], tmp_path, REPO_ROOT), tmp_path)
    assert cap.returncode == 0, cap.stderr
    workers = {name: cap.roles[name] for name in ("encode", "prefill", "decode")}
    for call in workers.values():
        assert call.env.get("ZE_AFFINITY_MASK") == "10" and "CUDA_VISIBLE_DEVICES" not in call.env
    assert workers["prefill"].flag("--block-size") == "64"
    assert '"kv_buffer_device":"xpu"' in workers["decode"].flag("--kv-transfer-config")
    assert workers["encode"].env["DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"] == '["generate"]'


def test_an_sglang_multimodal_worker_that_never_registers_is_named(tmp_path: Path) -> None:
    """The second seed, read from source: the installed init_multimodal.py registers in every
    multimodal init; a copy with one registration call removed is named by function and role."""
    from harness.audit.sglang_registration import (
        check_sglang_registration,
        sglang_multimodal_source,
    )

    installed = sglang_multimodal_source()
    assert installed is not None
    assert check_sglang_registration(installed) == []
    text = installed.read_text()
    start = text.index("async def init_multimodal_worker(")
    end = text.index("async def init_multimodal_prefill_worker(")
    body = text[start:end].replace("register_model_with_readiness_gate(", "print(")
    broken = tmp_path / "init_multimodal.py"
    broken.write_text(text[:start] + body + text[end:])
    [finding] = check_sglang_registration(broken)
    assert finding.role == "the PD / decode worker (--dedicated-mm-encoder)"
    assert "init_multimodal_worker never calls register_model_with_readiness_gate" in finding.what


def test_our_agg_launcher_hands_its_worker_the_embedding_cache_and_worker_args(
    tmp_path: Path,
) -> None:
    """As upstream's agg_multimodal.sh forwards its EXTRA_ARGS: the embedding-cache capacity and
    any other argument reach the worker (dry run through the role adapter, nothing started)."""
    from harness.audit.capture import plan_for, run_launcher
    from harness.profiles import load_profile

    profile = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)
    extra = [
        "--multimodal-embedding-cache-capacity-gb",
        "1",
        "--limit-mm-per-prompt",
        '{"image": 1}',
    ]
    case = profile.cases[0].model_copy(update={"launcher_args": extra})
    capture = run_launcher(plan_for(profile, "cpu", case, tmp_path, REPO_ROOT), tmp_path)
    argv = capture.roles["worker"].argv
    flags = dict(itertools.pairwise(argv))
    assert flags["--multimodal-embedding-cache-capacity-gb"] == "1", argv
    assert flags["--limit-mm-per-prompt"] == '{"image": 1}', argv
