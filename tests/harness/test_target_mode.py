"""Target mode for real: `python -m harness up` holds a CPU E/P/D in one process; the serve cases
run against it from another with `--target`; then a role of the running topology is killed and
the target is reported with its cause."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import load_profile
from harness.runtime.target import TargetTopology, check_target, load_target, target_plan

pytestmark = [pytest.mark.heavy, pytest.mark.vllm]
EPD = REPO_ROOT / "profiles" / "vllm" / "epd_qwen3-vl-2b.yaml"


def start_up(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    up = subprocess.Popen(
        [sys.executable, "-m", "harness", "up", "epd_qwen3-vl-2b", "--tier", "cpu"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "HARNESS_RUNS": str(tmp_path / "up-runs")},
    )  # fmt: skip
    assert up.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        lines.append(line)
        if line.startswith("Ctrl-C"):
            return up, "".join(lines)
        if not line and up.poll() is not None:
            break
    up.kill()
    raise AssertionError("harness up never got ready:\n" + "".join(lines)[-3000:])


def target_file(up_output: str, tmp_path: Path) -> Path:
    """The target YAML from what `up` printed: frontend, each worker's health URL, the model."""
    model = re.search(r"^ready in [\d.]+ s: \S+ \(cpu\), model (\S+)", up_output, re.M)
    frontend = re.search(r"^frontend\s+(http://\S+)\s", up_output, re.M)
    assert model and frontend, up_output
    roles = {
        name: {"health": url, "metrics": url.replace("/health", "/metrics")}
        for name, url in re.findall(r"^(\w+)\s+(http://\S+/health)\s", up_output, re.M)
    }
    spec = {
        "profile": "epd_qwen3-vl-2b",
        "tier": "cpu",
        "frontend": frontend.group(1),
        "model_dir": model.group(1),
        "roles": roles,
        "api_key_env": "HARNESS_TEST_API_KEY",
    }
    path = tmp_path / "target.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_cases_run_against_a_topology_another_process_holds(tmp_path: Path) -> None:
    up, output = start_up(tmp_path)
    try:
        target = target_file(output, tmp_path)
        env = {**os.environ, "HARNESS_TEST_API_KEY": "sk-test-secret-token"}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/serve", "-p", "no:cacheprovider", "-q",
             "--target", str(target), "--results", str(tmp_path / "r.jsonl"), "-rs"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout[-4000:]
        assert "2 passed" in run.stdout, run.stdout[-2000:]  # the plain case and bad input
        assert "--target runs epd_qwen3-vl-2b's cases only" in run.stdout
        assert "sk-test-secret-token" not in run.stdout + (tmp_path / "r.jsonl").read_text()

        spec = load_target(target)
        profile = load_profile(EPD, REPO_ROOT)
        check_target(spec, profile, target)
        plan = target_plan(spec, profile, tmp_path / "target-run")
        decode_pid = int(next((tmp_path / "up-runs").rglob("decode.pid")).read_text())
        with TargetTopology(plan, [], None) as topo:
            os.kill(decode_pid, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(TopologyFailure) as failure:
                while time.monotonic() - killed < 20:
                    topo.watch()
                    time.sleep(0.25)
        assert failure.value.cause == Cause.ROLE_UNREACHABLE, failure.value.report()
        assert failure.value.evidence.role == "decode"
        assert "after it was healthy" in failure.value.message
        assert time.monotonic() - killed < 5
    finally:
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=60)
    assert "no process or port left" in out or "role 'decode' exited" in out, out[-2000:]
