"""A stop while a worker's engine core is still starting (vLLM's CPU platform spawns it as a second
process, which then sets up its NIXL connector) leaves nothing: no process and no leased port
listening, many times in a row. The race this guards: a SIGKILLed process releases its memory
(its environment, hence its marker, can no longer be read) before it closes its sockets, so a
marker sweep alone saw nothing left while the prefill's ports still listened (seen once in the
self-test). The stop waits by PID for every process the topology ever had.

HARNESS_MIDSTART_REPEATS (default 20) sets how many launches; CI runs fewer (.ci/run)."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from harness.core.paths import REPO_ROOT, TOPOLOGY_ID_ENV
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import load_profile
from harness.topology.deployments import Launched
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import Topology, launch

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

REPEATS = int(os.environ.get("HARNESS_MIDSTART_REPEATS", "20"))
P_D = REPO_ROOT / "profiles" / "vllm" / "p_d_qwen3-vl-2b.yaml"
ENGINE_START_S = 90.0  # the roles' imports on 2 busy cores take 10-20 s; a generous bound


def engine_cores_starting(topo: Topology[Launched]) -> list[psutil.Process]:
    """The engine cores (a worker role's child processes) of a worker not ready yet."""
    topo.deployment.roles.refresh()
    for role in topo.plan.workers:
        proc = topo.deployment.roles.known.get(role.name)
        if proc is None:
            continue
        try:
            children = psutil.Process(proc.pid).children()
            if children and topo.health_state(role.name) != "ready":
                return children
        except psutil.NoSuchProcess:
            continue
    return []


def still_running(procs: list[psutil.Process]) -> list[int]:
    """Those of `procs` still running (the same process: pid and start time)."""
    return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_stop_while_an_engine_core_starts_leaves_nothing() -> None:
    profile = load_profile(P_D, REPO_ROOT)
    took = []
    for attempt in range(REPEATS):
        topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]))
        ports = list(topo.plan.ports.values())
        topo.start()
        cores: list[psutil.Process] = []
        try:
            deadline = time.monotonic() + ENGINE_START_S
            while not cores:
                assert time.monotonic() < deadline, f"attempt {attempt}: no engine core started"
                topo.watch()
                cores = engine_cores_starting(topo)
                time.sleep(0.05)
        finally:
            report = topo.stop()  # raises teardown_unclean naming survivors and port holders
        assert report is not None
        assert still_running(cores) == [], f"attempt {attempt}: the engine core outlived the stop"
        assert listening_ports(ports) == [], f"attempt {attempt}"
        assert marked_processes(TOPOLOGY_ID_ENV, topo.plan.topology_id) == [], f"attempt {attempt}"
        took.append(round(report.duration_s, 1))
    print(f"\n{REPEATS} stops mid engine start, all clean; stop took {took} s")
