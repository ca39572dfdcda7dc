"""Target mode for real: `python -m harness up` holds a CPU topology (agg, and E/P/D) in one
process; the serve cases run against it from another with `--target`, every oracle on, the path
oracle through the roles' metrics URLs; then a worker of the running topology is killed and the
next `--target` run names it (`role_unreachable`), as does the topology's own watch."""

from __future__ import annotations

import json
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
from harness.launch.launch_spec import LaunchSpec
from harness.launch.target import check_target, load_target, target_plan
from harness.profiles import load_profile
from harness.topology.topology import attach
from tests.harness.selftest_scope import EXHAUSTIVE

pytestmark = [pytest.mark.heavy, pytest.mark.vllm]
SECRET = "sk-test-secret-token"
# (profile, the worker killed, the cases `--target` runs: the profile's CPU post-merge cases
# that need no other launcher arguments than the ones `up` used)
TARGETS = [
    ("agg_qwen3-vl-2b", "worker", 4),
    pytest.param("epd_qwen3-vl-2b", "decode", 2, marks=EXHAUSTIVE),
]


def start_up(name: str, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    up = subprocess.Popen(
        [sys.executable, "-m", "harness", "up", name, "--tier", "cpu"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HARNESS_RUNS": str(tmp_path / "up-runs")},
    )
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


def target_file(name: str, up_output: str, tmp_path: Path) -> Path:
    """The target YAML from what `up` printed: frontend, each worker's health URL, the model."""
    model = re.search(r"^ready in [\d.]+ s: \S+ \(cpu\), model (\S+)", up_output, re.M)
    frontend = re.search(r"^frontend\s+(http://\S+)\s", up_output, re.M)
    assert model and frontend, up_output
    roles = {
        name: {"health": url, "metrics": url.replace("/health", "/metrics")}
        for name, url in re.findall(r"^(\w+)\s+(http://\S+/health)\s", up_output, re.M)
    }
    spec = {
        "profile": name,
        "tier": "cpu",
        "frontend": frontend.group(1),
        "model_dir": model.group(1),
        "roles": roles,
        "api_key_env": "HARNESS_TEST_API_KEY",
    }
    path = tmp_path / "target.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_target(target: Path, results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/serve",
            "-p",
            "no:cacheprovider",
            "-q",
            "--target",
            str(target),
            "--results",
            str(results),
            "-rs",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HARNESS_TEST_API_KEY": SECRET},
    )


def rows(results: Path) -> list[dict]:
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("name", "victim", "cases"), TARGETS, ids=["agg_qwen3-vl-2b", "epd_qwen3-vl-2b"]
)
def test_cases_run_against_a_topology_another_process_holds(
    tmp_path: Path, name: str, victim: str, cases: int
) -> None:
    up, output = start_up(name, tmp_path)
    try:
        target = target_file(name, output, tmp_path)
        run = run_target(target, tmp_path / "r.jsonl")
        assert run.returncode == 0, run.stdout[-4000:]
        assert f"{cases} passed" in run.stdout, run.stdout[-2000:]
        assert f"--target runs {name}'s cases only" in run.stdout
        assert SECRET not in run.stdout + (tmp_path / "r.jsonl").read_text()
        passed = [r for r in rows(tmp_path / "r.jsonl") if r["outcome"] == "passed"]
        assert len(passed) == cases
        answered = [r for r in passed if any(c.startswith("path ") for c in r["checks"])]
        assert answered and all(f"{victim} +1" in " ".join(r["checks"]) for r in answered)

        victim_pid = int(next((tmp_path / "up-runs").rglob(f"{victim}.pid")).read_text())
        spec = load_target(target)
        profile = load_profile(REPO_ROOT / "profiles" / "vllm" / f"{name}.yaml", REPO_ROOT)
        check_target(spec, profile, target)
        plan = target_plan(
            spec, LaunchSpec.of(profile, spec.tier, profile.cases[0]), tmp_path / "watch"
        )
        with attach(plan, [], None) as topo, pytest.raises(TopologyFailure) as failure:
            os.kill(victim_pid, signal.SIGKILL)
            killed = time.monotonic()
            while time.monotonic() - killed < 20:
                topo.watch()
                time.sleep(0.25)
        assert failure.value.cause == Cause.ROLE_UNREACHABLE, failure.value.report()
        assert failure.value.evidence.role == victim

        # `up` ends its whole topology once a role dies, so now no worker answers: the next run
        # fails its readiness on the first worker it probes, with the same cause
        after = run_target(target, tmp_path / "after.jsonl")
        assert after.returncode != 0, after.stdout[-2000:]
        failed = [r for r in rows(tmp_path / "after.jsonl") if r["outcome"] == "failed"]
        assert failed and all(r["cause"] == Cause.ROLE_UNREACHABLE.value for r in failed)
        workers = "|".join(r.name for r in profile.worker_roles)
        assert re.search(rf"deployed role '({workers})' does not answer", failed[0]["message"])
    finally:
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=60)
    assert f"role '{victim}' exited" in out or "no process or port left" in out, out[-2000:]
