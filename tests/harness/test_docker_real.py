"""`harness docker` against a real Docker daemon and the tiny local image that
`.ci/docker_setup.sh start` imports (busybox, no registry). Skipped, with the reason, when no
daemon answers or the image is missing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.cli.docker import LABEL, OWNER_LABEL
from tests.harness.docker_daemon import client_with_image, containers_of

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("HARNESS_DOCKER_IMAGE", "serve-harness/busybox:local")


CLIENT, SKIP_REASON = client_with_image(IMAGE, "run .ci/docker_setup.sh start to import it")
pytestmark = [
    pytest.mark.skipif(CLIENT is None, reason=SKIP_REASON),
    # Every `harness docker` start removes the containers of this host's killed runs, whoever's
    # (test_docker_image's runs, in the heavy group, too). Beside them, one of those starts can
    # remove this module's orphan before its own next run does: one group, one at a time.
    pytest.mark.xdist_group("heavy"),
]


def harness_docker(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", "docker", "--image", IMAGE, *args]


def test_runs_command_with_overlay_env_and_results(tmp_path: Path) -> None:
    overlay = tmp_path / "plan_override.py"
    overlay.write_text("OVERLAID\n")
    results = tmp_path / "results"
    script = (
        "cat /workspace/harness/launch/plan.py; echo token=$HF_TOKEN other=$NOT_ALLOWED; "
        "touch /workspace/harness/launch/plan.py 2>/dev/null || echo read-only; "
        "echo ok > /results/x; exit 7"
    )
    env = {**os.environ, "HF_TOKEN": "hf_realsecret42", "NOT_ALLOWED": "leak"}
    proc = psutil.Popen(
        harness_docker(
            "--results-dir",
            str(results),
            "--overlay",
            f"{overlay}:harness/launch/plan.py",
            "--command",
            f"sh -c '{script}'",
        ),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 7, out + err
    assert out.splitlines() == ["OVERLAID", "token=*** other=", "read-only"]
    assert "hf_realsecret42" not in out + err
    assert "-e HF_TOKEN='***'" in err
    assert (results / "x").read_text() == "ok\n"
    assert containers_of(CLIENT, proc) == []


def start_sleeping_container(
    tmp_path: Path, states: tuple[str, ...] = ("running",), poll_s: float = 0.2
) -> psutil.Popen:
    """`harness docker` running `sleep 600`, returned once its container is in one of `states`."""
    proc = psutil.Popen(
        harness_docker("--results-dir", str(tmp_path), "--command", "sleep 600"),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not [c for c in containers_of(CLIENT, proc) if c.status in states]:
        if proc.poll() is not None or time.monotonic() >= deadline:
            proc.kill()
            raise AssertionError(f"container never started: {proc.communicate()}")
        time.sleep(poll_s)
    return proc


def terminate_and_wait(proc: psutil.Popen, signum: int) -> str:
    """Send `signum`, wait for exit; returns stderr. Kills the harness if it hangs."""
    try:
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


def test_ctrl_c_removes_the_container(tmp_path: Path) -> None:
    proc = start_sleeping_container(tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted; container removed" in err
    assert containers_of(CLIENT, proc) == []
    print(f"Ctrl-C -> container removed and harness docker exited in {took:.2f} s")


def test_sigterm_removes_the_container(tmp_path: Path) -> None:
    proc = start_sleeping_container(tmp_path)
    err = terminate_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 130, err
    assert containers_of(CLIENT, proc) == []


@pytest.mark.parametrize("attempt", range(3))
def test_sigterm_while_the_container_starts_removes_it(tmp_path: Path, attempt: int) -> None:
    """Regression (CI): SIGTERM landing while the daemon answered `start` left the container
    running, because the harness never got its handle. The signal is now held over create+start."""
    proc = start_sleeping_container(tmp_path, states=("created", "running"), poll_s=0.01)
    err = terminate_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 130, err
    assert containers_of(CLIENT, proc) == []


def test_a_killed_runs_container_is_removed_by_the_next_run(tmp_path: Path) -> None:
    """SIGKILL gives the harness no chance to clean up; the next `harness docker` does it."""
    killed = start_sleeping_container(tmp_path / "killed")
    killed.kill()
    killed.communicate()
    [orphan] = containers_of(CLIENT, killed)
    assert orphan.status == "running"
    bystander = CLIENT.containers.run(
        IMAGE, ["sleep", "600"], detach=True, labels={LABEL: "1", OWNER_LABEL: str(os.getpid())}
    )  # labelled by hand, no owner host/start time: the sweep must leave it alone
    try:
        proc = subprocess.run(
            harness_docker("--results-dir", str(tmp_path / "next"), "--command", "true"),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        removed = re.search(r"removed \d+ container\(s\) a killed run left: (.*)", proc.stderr)
        assert removed and orphan.short_id in removed[1].split(", "), proc.stderr
        assert containers_of(CLIENT, killed) == []
        bystander.reload()
        assert bystander.status == "running"
    finally:
        bystander.remove(force=True)


def test_a_missing_image_is_pulled_like_docker_run_and_a_failed_pull_is_named(
    tmp_path: Path,
) -> None:
    """No registry is reachable here, so the pull fails for real; the error says so, exit 2."""
    missing = "serve-harness/never-built:local"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "docker",
            "--image",
            missing,
            "--results-dir",
            str(tmp_path),
            "--command",
            "true",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"serve-harness docker: {missing} is not local; pulling it" in proc.stderr
    assert f"serve-harness docker: --image {missing}: not found locally and the pull failed: " in (
        proc.stderr
    )
