"""The CPU-tier serving image for real: nothing left after Ctrl-C (container, processes, ports),
and the validation recipe (the shipped E/P/D launcher vs a copy without its encode health line)
with results and per-role logs back on the host. Skipped, with the reason, when no
daemon answers or the image was not built (docker/build-cpu-image.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.core.paths import CHECKOUT_ENV
from harness.machine.port_registry import PortRegistry, port_registry_file
from harness.topology.processes import listening_ports
from tests.harness.docker_daemon import client_with_image, containers_of

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("HARNESS_CPU_IMAGE", "serve-harness/cpu:local")
IMAGE_CHECKOUT = "/workspace"  # where cpu.Dockerfile puts the checkout: its processes' marker
EPD = "launchers/vllm/disagg_multimodal_epd.sh"
HEALTH_LINE = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"
AGG_CASE = "tests/serve/test_serve.py::test_serve[mm_agg_qwen3-vl-2b]"
EPD_CASE = "mm_epd_llava-1.5-7b"  # an E/P/D id judged on its own: one launch per run
SGLANG_ID = "mm_sglang_pd_qwen3-vl-2b"  # upstream's SGLang pre_merge P/D id, judged on its own


CLIENT, SKIP_REASON = client_with_image(IMAGE, "run docker/build-cpu-image.sh")
pytestmark = [
    pytest.mark.heavy,
    pytest.mark.vllm,
    pytest.mark.cpu,
    pytest.mark.skipif(CLIENT is None, reason=SKIP_REASON),
]


def image_processes(containers: set[str] | None = None) -> list[psutil.Process]:
    """Processes a harness inside the image started (the container shares our PID namespace);
    with `containers` (ids), only those in these containers' cgroups: another test's container
    of the same image, still going down beside this one, is not this run's leftover."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(CHECKOUT_ENV) != IMAGE_CHECKOUT:
                continue
            if containers is not None:
                cgroup = Path(f"/proc/{proc.pid}/cgroup").read_text()
                if not any(cid in cgroup for cid in containers):
                    continue
            found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def image_leased_ports() -> set[int]:
    """Ports in the host's registry leased by a harness inside the image (its owner runs in the
    image's checkout), not by a test running beside this one (scripts/self-test runs light tests
    on a second worker)."""
    path = port_registry_file()
    records = json.loads(path.read_text()) if path.is_file() and path.read_text() else []
    ports = set()
    for record in records:
        try:
            if psutil.Process(record["owner_pid"]).cwd() == IMAGE_CHECKOUT:
                ports.add(record["port"])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return ports


def assert_nothing_left(
    owner: psutil.Popen, ports: set[int], containers: set[str] | None = None
) -> None:
    deadline = time.monotonic() + 10
    while image_processes(containers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert image_processes(containers) == []
    assert containers_of(CLIENT, owner) == []
    # nothing listens on them; a served request's closed connection may sit in TIME_WAIT. Once
    # released, a port may be leased again by a test beside this one (the light tests run on a
    # second worker): one leased now is that test's, not this run's leftover.
    listening = listening_ports(ports)
    leased_again = {record.port for record in PortRegistry().leases()}
    assert [port for port in listening if port not in leased_again] == []


def interrupt_once_running(proc: psutil.Popen) -> tuple[set[int], set[str]]:
    """Wait for the topology inside, check its leases from the host, Ctrl-C the run; the ports
    it leased and its containers' ids."""
    deadline = time.monotonic() + 120
    containers: set[str] = set()
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        containers = {c.id for c in containers_of(CLIENT, proc)}
        if containers and len(image_processes(containers)) >= 3:  # frontend, worker, launcher
            break
        time.sleep(0.2)
    assert len(image_processes(containers)) >= 3, "the topology never started in its container"
    ports = image_leased_ports()
    assert ports, "the harness inside leased no port in the host's registry"
    # the host sees those leases' owner running (same PID namespace), so it cannot hand them out
    assert ports <= {record.port for record in PortRegistry().leases()}
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-3000:]
    assert "container removed" in out
    return ports, containers


def test_ctrl_c_leaves_no_container_process_or_port(tmp_path: Path) -> None:
    proc = psutil.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "docker",
            "--image",
            IMAGE,
            "--results-dir",
            str(tmp_path / "results"),
            "--",
            AGG_CASE,
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ports, containers = interrupt_once_running(proc)
    finally:
        if proc.poll() is None:  # a failed assertion must not leave the run behind
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    assert_nothing_left(proc, ports, containers)


def test_the_image_serves_the_sglang_stack_too(tmp_path: Path) -> None:
    """The image carries the SGLang venv beside vLLM's: upstream's SGLang pre_merge ids run and
    are judged inside it, with nothing left behind."""
    results = tmp_path / "results"
    proc = psutil.Popen(
        [sys.executable, "-m", "harness", "docker", "--image", IMAGE, "--results-dir",
         str(results), "--", f"tests/serve/test_serve.py::test_serve[{SGLANG_ID}]"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:]
    records = [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]
    assert [(r["test_id"], r["outcome"]) for r in records] == [(SGLANG_ID, "passed")], records
    assert any(p.name == "decode.log" for p in results.rglob("*.log"))
    assert_nothing_left(proc, set())


def test_validate_names_the_missing_encode_health_and_passes_the_shipped_launcher(
    tmp_path: Path,
) -> None:
    shipped = (REPO_ROOT / EPD).read_text()
    assert HEALTH_LINE in shipped
    unpatched = tmp_path / "disagg_multimodal_epd.sh"
    unpatched.write_text("".join(ln for ln in shipped.splitlines(True) if HEALTH_LINE not in ln))
    unpatched.chmod(0o755)
    out, err_file = tmp_path / "table.md", tmp_path / "stderr.log"
    proc = psutil.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "validate",
            "image",
            IMAGE,
            "--change",
            f"{unpatched}:{EPD}",
            "--ids",
            EPD_CASE,
            "--results-dir",
            str(tmp_path / "v"),
        ],
        cwd=REPO_ROOT,
        stdout=out.open("w"),
        stderr=err_file.open("w"),
    )
    ports: set[int] = set()  # what the harness inside leased, seen while it runs
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        ports |= image_leased_ports()
        time.sleep(0.5)
    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    table, err = out.read_text(), err_file.read_text()
    assert ports, "the harness inside leased no port in the host's registry"
    assert proc.returncode == 1, table + err[-3000:]  # the changed run's status
    assert f"| {EPD_CASE} | {EPD} (as shipped) | cpu | passed |" in table, table
    assert f"| {EPD_CASE} | {EPD} (changed) | cpu | failed | no_health_source: " in table
    failing = next(line for line in table.splitlines() if "(changed)" in line)
    assert "encode" in failing, failing
    assert (tmp_path / "v" / "validation.md").read_text().strip() == table.strip()
    for side in ("as-shipped", "changed"):  # results and every role's log came back to the host
        records = (tmp_path / "v" / side / "results.jsonl").read_text().splitlines()
        assert [json.loads(line)["test_id"] for line in records] == [EPD_CASE]
        logs = {p.name for p in (tmp_path / "v" / side).rglob("*.log")}
        assert {"frontend.log", "encode.log", "prefill.log", "decode.log"} <= logs, logs
    assert "test session starts" in err  # the containers' output, kept apart from the table
    assert_nothing_left(proc, ports)
