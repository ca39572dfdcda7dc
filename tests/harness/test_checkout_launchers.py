"""Under `--dynamo-src` the checkout's own matrix is the map: each case runs the script the
checkout's tests name for it (its upstream id, its profile's ids, its stack and topology), the
profile's `upstream_launcher` only where the checkout has no matrix files, and a case whose
launcher the checkout lacks is not run (never ours in its place). Pure: no launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cases.case import ServeCase
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.launch.role_adapter import Refused, adapt
from harness.profiles import Profile, load_profile
from harness.profiles.checkout_matrix import matrix_at
from tests.harness.upstream_profile_files import MATRIX, write_matrix
from tests.harness.upstream_shapes import (
    MATRIX_LAUNCHERS,
    SGLANG_AGG_PATH,
    XPU_AGG_PATH,
    XPU_EPD_PATH,
)


def profile(rel: str) -> Profile:
    return load_profile(REPO_ROOT / "profiles" / rel, REPO_ROOT)


SGLANG_AGG = profile("sglang/agg_qwen3-vl-2b.yaml")
SGLANG_EPD = profile("sglang/epd_qwen3-vl-2b.yaml")
XPU_EPD = profile("vllm/epd_xpu_qwen3-vl-2b.yaml")
VLLM_E_PD = profile("vllm/e_pd_qwen3-vl-2b.yaml")


def checkout(root: Path, launchers: dict[str, str] = MATRIX_LAUNCHERS, files: bool = True) -> Path:
    matrix_at.cache_clear()
    if files:
        write_matrix(root)
    for rel, text in launchers.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def spec(p: Profile, root: Path, case: int = 0) -> LaunchSpec:
    return LaunchSpec.of(p, "cpu", p.cases[case], source=DynamoSource(root))


def test_a_renamed_launcher_is_the_one_the_matrix_names(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    launch = spec(SGLANG_AGG, root)
    assert launch.script == root / SGLANG_AGG_PATH  # not the deleted multimodal_agg.sh, not ours
    assert launch.choice.origin == "checkout" and launch.choice.missing is None
    assert "tests/serve/test_sglang.py:57" in launch.choice.why  # multimodal_agg_fd_qwen
    assert launch.args[:2] == ("--model-path", "Qwen/Qwen3-VL-2B-Instruct")  # its model flag
    assert launch.choice.named == f"{root.name}:{SGLANG_AGG_PATH}"
    ours = LaunchSpec.of(SGLANG_AGG, "cpu", SGLANG_AGG.cases[0], source=None)
    assert ours.script == REPO_ROOT / SGLANG_AGG.launcher and ours.signature != launch.signature


def test_an_id_the_matrix_carries_runs_its_script_with_its_args(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    case = next(i for i, c in enumerate(SGLANG_EPD.cases) if c.id == "multimodal_disagg_qwen")
    launch = spec(SGLANG_EPD, root, case)
    assert launch.script == root / "examples/backends/sglang/launch/multimodal_disagg.sh"
    assert launch.choice.upstream_id == "multimodal_disagg_qwen"
    assert "names it for multimodal_disagg_qwen" in launch.choice.why
    # the same profile's other case: the same script (no id of its own upstream)
    other = spec(SGLANG_EPD, root, next(i for i, c in enumerate(SGLANG_EPD.cases) if i != case))
    assert other.script == launch.script and other.choice.upstream_id is None


def test_a_topology_the_matrix_maps_without_an_id_of_ours(tmp_path: Path) -> None:
    root = checkout(tmp_path, {"examples/backends/vllm/launch/disagg_multimodal_e_pd.sh": "#!"})
    launch = spec(VLLM_E_PD, root)
    assert launch.script == root / "examples/backends/vllm/launch/disagg_multimodal_e_pd.sh"
    assert "tests/serve/multimodal_profiles/vllm.py" in launch.choice.why
    assert "topology e_pd" in launch.choice.why


def test_the_xpu_launcher_is_the_profiles_default_where_the_matrix_names_none(
    tmp_path: Path,
) -> None:
    root = checkout(tmp_path)
    launch = spec(XPU_EPD, root)
    assert launch.script == root / XPU_EPD_PATH
    assert "the profile's default: its matrix names none for it" in launch.choice.why
    case = ServeCase(XPU_EPD, XPU_EPD.cases[0], "cpu")
    assert "--dynamo-src" in (case.skip_reason(None) or "")  # without a checkout: the same program


def test_upstreams_xpu_ids_run_the_checkouts_xpu_launcher(tmp_path: Path) -> None:
    """vllm_xpu.py's agg ids (skipped upstream for a missing XPU kernel) run on the CPU tier."""
    root = checkout(tmp_path)
    xpu_agg = profile("vllm/agg_xpu_qwen3-vl-2b.yaml")
    launch = spec(xpu_agg, root, 1)  # mm_xpu_agg_qwen3-vl-2b_b64
    assert launch.script == root / XPU_AGG_PATH
    assert launch.choice.upstream_id == "mm_agg_qwen3-vl-2b_b64"
    assert launch.choice.why.startswith("tests/serve/multimodal_profiles/vllm_xpu.py:")
    assert launch.args[-2:] == ("--block-size", "16")  # the XPU profile's extra_vllm_args
    cuda = spec(profile("vllm/agg_qwen3-vl-2b.yaml"), root, 1)  # the same upstream id on CUDA
    assert cuda.script == root / "examples/backends/vllm/launch/agg_multimodal.sh"
    router = spec(profile("vllm/agg_router_xpu_qwen3-vl-2b.yaml"), root)
    assert router.script == root / "examples/backends/vllm/launch/xpu/agg_multimodal_router_xpu.sh"
    assert router.choice.upstream_id == "mm_agg_router_qwen3-vl-2b"


def test_a_checkout_without_the_launcher_says_so_and_runs_nothing_of_ours(tmp_path: Path) -> None:
    no_agg = {k: v for k, v in MATRIX_LAUNCHERS.items() if k != SGLANG_AGG_PATH}
    root = checkout(tmp_path / "named", no_agg)  # its matrix names agg_vision.sh; not there
    launch = spec(SGLANG_AGG, root)
    assert launch.choice.missing is not None and SGLANG_AGG_PATH in launch.choice.missing
    bare = checkout(tmp_path / "bare", {}, files=False)  # no matrix, no launcher at all
    launch = spec(SGLANG_AGG, bare)
    assert launch.choice.missing == (
        "the checkout has no launcher for SGLang agg: no matrix files, and "
        "examples/backends/sglang/launch/multimodal_agg.sh is not there"
    )
    assert launch.choice.named.startswith("none")
    case = ServeCase(SGLANG_AGG, SGLANG_AGG.cases[0], "cpu", DynamoSource(bare))
    assert case.skip_reason(None) == launch.choice.missing


def test_no_matrix_files_the_profiles_upstream_launcher(tmp_path: Path) -> None:
    old = SGLANG_AGG.upstream_launcher or ""
    root = checkout(tmp_path, {old: "#!/bin/bash\n"}, files=False)
    launch = spec(SGLANG_AGG, root)
    assert launch.script == root / old
    assert "it has no test matrix files" in launch.choice.why
    assert list(MATRIX)  # the files a checkout of today has (the other tests)


# The role adapter on what today's upstream launchers pass (no launch: adapt() alone).
ROLE_PORTS = {
    "DYN_SYSTEM_PORT1": "encode",
    "DYN_SYSTEM_PORT2": "prefill",
    "DYN_SYSTEM_PORT3": "decode",
}


LEASED = {
    "21001": "DYN_SYSTEM_PORT1",
    "21002": "DYN_SYSTEM_PORT2",
    "21003": "DYN_SYSTEM_PORT3",
    "21013": "SGLANG_NCCL_PORT3",
}


def env(**extra: str) -> dict[str, str]:
    return {
        "HARNESS_DEVICE": "cpu",
        "HARNESS_ROLE_PORTS": json.dumps(ROLE_PORTS),
        "HARNESS_LEASED_PORTS": json.dumps(LEASED),
        "DYN_SYSTEM_PORT1": "21001",
        "DYN_SYSTEM_PORT2": "21002",
        "DYN_SYSTEM_PORT3": "21003",
        "HARNESS_CPU_MODEL": "/tiny/qwen3_vl",
        "HARNESS_PROFILE_MODEL": "Qwen/Qwen3-VL-2B-Instruct",
        "HARNESS_SGLANG_PYTHON": "/bin/sh",  # exists; never run here
        **extra,
    }


SGLANG_DECODE = [
    "-m", "dynamo.sglang", "--enable-multimodal", "--disaggregation-mode", "decode",
    "--model-path", "Qwen/Qwen3-VL-2B-Instruct",
]  # fmt: skip


def test_a_worker_without_a_system_port_is_named_by_its_command_line() -> None:
    """It runs (its answers are judged) as the role its command line names, on that role's
    leased rendezvous port, and carries the launcher fault the case fails on afterwards."""
    out = adapt(SGLANG_DECODE, env(SGLANG_NCCL_PORT3="21013"))
    assert out.role == "decode" and out.no_port is not None
    assert "worker 'decode'" in out.no_port and "DYN_SYSTEM_PORT unset" in out.no_port
    assert "start it with DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT3}" in out.no_port
    assert "health contract is not met" in out.no_port
    assert out.argv[out.argv.index("--nccl-port") + 1] == "21013"
    anonymous = ["-m", "dynamo.sglang", "--model-path", "Qwen/Qwen3-VL-2B-Instruct"]
    with pytest.raises(Refused) as refused:  # no port, and nothing says which role it is
        adapt(anonymous, env())
    assert refused.value.role is None and refused.value.fault == "launcher"


def test_crossed_ports_name_the_worker_on_the_wrong_one() -> None:
    with pytest.raises(Refused) as refused:
        adapt(SGLANG_DECODE, env(DYN_SYSTEM_PORT="21002"))  # prefill's
    assert refused.value.role == "decode" and refused.value.fault == "launcher"
    assert "the port of 'prefill' (DYN_SYSTEM_PORT2)" in str(refused.value)
    assert "start 'decode' with DYN_SYSTEM_PORT=${DYN_SYSTEM_PORT3}" in str(refused.value)


def test_gpu_memory_options_and_xpu_device_choices_are_mapped_on_cpu() -> None:
    prefill = [
        "-m", "dynamo.sglang", "--disaggregation-mode", "prefill",
        "--model-path", "Qwen/Qwen3-VL-2B-Instruct", "--enable-memory-saver",
        "--delete-ckpt-after-loading", "--mem-fraction-static", "0.4",
    ]  # fmt: skip
    out = adapt(prefill, env(DYN_SYSTEM_PORT="21002"))
    assert "--enable-memory-saver" not in out.argv and "--delete-ckpt-after-loading" not in out.argv
    notes = "; ".join(out.notes)
    assert "dropped --delete-ckpt-after-loading (would delete the tiny checkpoint" in notes
    xpu = [
        "-m", "dynamo.vllm", "--disaggregation-mode", "decode", "--model",
        "Qwen/Qwen3-VL-2B-Instruct", "--block-size", "64", "--enforce-eager",
        "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_buffer_device":"xpu"}',
    ]  # fmt: skip
    out = adapt(xpu, env(DYN_SYSTEM_PORT="21003", ZE_AFFINITY_MASK="2"))
    assert "ZE_AFFINITY_MASK" in out.unset
    assert "dropped --block-size 64" in "; ".join(out.notes)
    config = json.loads(out.argv[out.argv.index("--kv-transfer-config") + 1])
    assert config["kv_buffer_device"] == "cpu"
    assert "unset ZE_AFFINITY_MASK=2 (the role's XPU device" in "; ".join(out.notes)


def test_every_cpu_engine_runs_in_its_familys_dtype_and_a_profiles_longer_context() -> None:
    """The flags' float32 by default; the family's dtype where the plan hands one (Qwen3.5:
    bfloat16, core/precision.py), on vLLM and SGLang alike; a profile's longer context."""
    worker = ["-m", "dynamo.vllm", "--model", "Qwen/Qwen3-VL-2B-Instruct"]

    def value(argv: list[str], flag: str) -> str:
        return argv[argv.index(flag) + 1]

    plain = adapt(worker, env(DYN_SYSTEM_PORT="21001")).argv
    assert value(plain, "--dtype") == "float32" and value(plain, "--max-model-len") == "2048"
    wider = env(DYN_SYSTEM_PORT="21001", HARNESS_CPU_DTYPE="bfloat16")
    wider["HARNESS_CPU_MAX_MODEL_LEN"] = "10240"
    argv = adapt(worker, wider).argv
    assert value(argv, "--dtype") == "bfloat16" and value(argv, "--max-model-len") == "10240"
    assert argv.count("--dtype") == 1
    sglang = adapt(SGLANG_DECODE, env(DYN_SYSTEM_PORT="21003", HARNESS_CPU_DTYPE="bfloat16"))
    assert value(sglang.argv, "--dtype") == "bfloat16"


def test_the_plan_hands_the_roles_the_familys_dtype() -> None:
    from harness.core.precision import family_dtype

    assert family_dtype("qwen3_5") == "bfloat16"
    assert family_dtype("qwen3_vl") == family_dtype(None) == "float32"


def test_a_python_only_checkout_runs_our_launchers_and_says_so(tmp_path: Path) -> None:
    """`validate patch` patches the installed Python into a tree with no launchers: its launches
    run ours, and the choice says why (never silently)."""
    from harness.launch.dynamo_patch import patched_checkout

    if not (Path(__import__("sysconfig").get_paths()["purelib"]) / "dynamo" / "vllm").is_dir():
        pytest.skip("needs the CPU-tier venv (ai-dynamo installed)")
    patch = REPO_ROOT / "docs" / "patches" / "dynamo-1.6.1-encoder-dtype.patch"
    root = patched_checkout(patch, tmp_path / "patched")
    choice = spec(VLLM_E_PD, root).choice
    assert choice.origin == "ours" and choice.missing is None
    assert choice.script == REPO_ROOT / "launchers/vllm/disagg_multimodal_e_pd.sh"
    assert "Python only (the installed ai-dynamo with dynamo-1.6.1-encoder-dtype.patch" in (
        choice.why
    )
