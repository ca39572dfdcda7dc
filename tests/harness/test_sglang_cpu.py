"""SGLang on the CPU tier, for real: the second seed's class in Dynamo's SGLang multimodal
worker. In a checkout made from the installed ai-dynamo with one edit (the PD worker of the
SGLang E/PD topology serves its endpoint but never registers its model: the class of the
upstream fault where multimodal workers never registered with discovery and the frontend
answered 503), the topology fails never_registered naming the role, its missing card and what
the frontend still waits for, long before the budget; nothing is left running or listening."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT, TOPOLOGY_ID_ENV
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.dynamo_patch import patched_checkout
from harness.launch.dynamo_src import DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import load_profile
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import launch

pytestmark = [pytest.mark.heavy, pytest.mark.sglang, pytest.mark.cpu]

SEED_PATCH = Path(__file__).parent / "sglang_worker_never_registers.patch"
E_PD = REPO_ROOT / "profiles" / "sglang" / "e_pd_qwen3-vl-2b.yaml"


def test_a_multimodal_worker_that_never_registers_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = DynamoSource(patched_checkout(SEED_PATCH, tmp_path / "dynamo"))
    profile = load_profile(E_PD, REPO_ROOT)
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0], source=checkout))
    with pytest.raises(TopologyFailure) as raised, topo:
        pass
    failure = raised.value
    assert failure.cause == Cause.NEVER_REGISTERED, failure.report()
    assert failure.evidence.role == "pd", failure.report()
    assert "role 'pd' registered its endpoint but no model card" in failure.message
    needs = "the frontend still needs: encode (encode) needs prefill+decode or aggregated"
    assert needs in failure.message.lower(), failure.message
    assert marked_processes(TOPOLOGY_ID_ENV, topo.plan.topology_id) == []
    assert listening_ports(topo.plan.ports.values()) == []
