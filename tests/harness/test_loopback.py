"""Everything a topology listens on is bound to loopback, or the harness names what is not."""

from pathlib import Path

import pytest

from harness.core.paths import TOPOLOGY_ID_ENV
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.machine.port_registry import PortRegistry
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import launch
from tests.harness.faults import fault_profile


def test_frontend_bound_to_all_interfaces_is_named(tmp_path: Path) -> None:
    profile = fault_profile("mocker", launcher_args=["--frontend-host", "0.0.0.0"])
    topo = launch(
        LaunchSpec.of(profile, "cpu", profile.cases[0]), registry=PortRegistry(tmp_path / "p.json")
    )
    with pytest.raises(TopologyFailure) as err, topo:
        pass
    assert err.value.cause == Cause.EXPOSED_LISTENER
    port = topo.plan.ports["DYN_HTTP_PORT"]
    assert f"0.0.0.0:{port}" in err.value.message and "dynamo.frontend" in err.value.message
    assert not marked_processes(TOPOLOGY_ID_ENV, topo.plan.topology_id)
    assert not listening_ports(topo.plan.ports.values())


def test_loopback_topology_passes_the_check(tmp_path: Path) -> None:
    profile = fault_profile("mocker")
    with launch(
        LaunchSpec.of(profile, "cpu", profile.cases[0]), registry=PortRegistry(tmp_path / "p.json")
    ) as t:
        assert "loopback_only" in t.phase_times
        assert len(t.processes()) >= 4  # launcher, event broker, frontend, worker
