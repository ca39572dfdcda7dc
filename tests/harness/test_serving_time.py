"""The system's serving time is told apart from the harness's own: every chat request a
topology sends counts from sent to answered, a held one from open to close (Topology.answering_s,
each result's served_s). Real processes: a Dynamo frontend and a mocker worker."""

from __future__ import annotations

import time

from harness.topology.deployments import Launched
from harness.topology.topology import Topology
from tests.harness.faults import HELLO, Clock, fault_profile, run_fault


def test_every_request_counts_from_sent_to_answered() -> None:
    seen: dict[str, float] = {}

    def body(topo: Topology[Launched], clock: Clock) -> None:
        assert topo.answering_s == 0.0
        started = time.monotonic()
        assert topo.post_chat({**HELLO, "max_tokens": 64}).status_code == 200
        with topo.held_chat({**HELLO, "max_tokens": 64}) as hold:
            assert hold.status == 200
        seen["wall"] = time.monotonic() - started
        seen["answering"] = topo.answering_s
        time.sleep(0.5)  # the harness's own time: not counted
        seen["after"] = topo.answering_s

    run = run_fault(fault_profile("mocker", ["--speedup-ratio", "0.2"]), body)
    assert run.failure is None, run.failure
    print(f"\nwall {seen['wall']:.3f} s, answering {seen['answering']:.3f} s")
    assert 0.0 < seen["answering"] <= seen["wall"]
    assert seen["answering"] > 0.5 * seen["wall"]
    assert seen["after"] == seen["answering"]
