"""A role's death while a chat request is in flight is raised within a poll: the request still
in flight is abandoned, not waited for (a frontend whose worker died may hold it until the
request budget runs out)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.launch.target import TargetSpec, target_plan
from harness.profiles import load_profile
from harness.topology.deployments import Deployed
from harness.topology.topology import Topology

# The abandoned request's own timeout: raising before it is not waiting for it.
REQUEST_TIMEOUT_S = 30


@pytest.fixture
def silent_frontend_double() -> Iterator[str]:
    """TEST DOUBLE for a frontend that accepted a request and never answers it: a real frontend
    holds a request this way only after its worker died mid-request, which no real component
    does on demand at a known moment."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


class RoleDiesDouble(Deployed):
    """TEST DOUBLE for a deployment whose worker dies after the request is sent."""

    def __init__(self, after_s: float) -> None:
        super().__init__()
        self.dies_at = time.monotonic() + after_s

    def watch(self, topo: Topology[Any]) -> None:
        if time.monotonic() >= self.dies_at:
            raise topo.failure(Cause.ROLE_EXITED, "role 'worker' exited mid-test", role="worker")


def test_a_role_death_mid_request_is_raised_without_waiting_for_the_request(
    silent_frontend_double: str, tmp_path: Path
) -> None:
    profile = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)
    spec = TargetSpec(profile="agg", tier="cpu", frontend=silent_frontend_double, roles={})
    plan = target_plan(spec, LaunchSpec.of(profile, spec.tier, profile.cases[0]), tmp_path)
    topo = Topology(plan, [], RoleDiesDouble(after_s=0.5))
    with pytest.raises(TopologyFailure) as failure:
        topo.post_chat({"messages": []}, timeout_s=REQUEST_TIMEOUT_S)
    # a request waited out would end REQUEST_TIMEOUT: the role's death was raised while in flight
    assert failure.value.cause == Cause.ROLE_EXITED, failure.value.report()
