"""The user's Dynamo as the system under test, for real on the CPU tier: a checkout in upstream's
layout (tests/harness/dynamo_checkout.py) whose own E/P/D launcher runs unmodified through the
role adapter in place of ours. (a) the checkout's change runs in every role, in upstream main's
port contract: test_upstream_shapes.py (vllm_epd_role_vars); (b) its encode worker
without a health source fails no_health_source naming encode and passes with one:
test_validate_checkout.py runs both sides in both contracts; (c) a flag the CPU tier cannot map,
and a role that starts another model than the profile's, are refused, naming the role; (d) nothing
is left running or listening after any of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT, TOPOLOGY_ID_ENV
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.dynamo_src import DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import load_profile
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import launch
from tests.harness.dynamo_checkout import (
    DECODE_NEVER_REGISTERS,
    ENCODE_NEVER_REGISTERS,
    build_checkout,
)
from tests.harness.selftest_scope import EXHAUSTIVE

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

PROFILE = load_profile(
    REPO_ROOT / "tests" / "harness" / "profiles" / "checkout" / "epd_qwen3-vl-2b.yaml", REPO_ROOT
)


def nothing_left(topology_id: str, ports: list[int]) -> None:
    assert marked_processes(TOPOLOGY_ID_ENV, topology_id) == []
    assert listening_ports(ports) == []


def launch_failure(monkeypatch: pytest.MonkeyPatch, checkout: Path) -> TopologyFailure:
    topo = launch(LaunchSpec.of(PROFILE, "cpu", PROFILE.cases[0], source=DynamoSource(checkout)))
    ports = list(topo.plan.ports.values())
    with pytest.raises(TopologyFailure) as failure, topo:
        pass
    nothing_left(topo.plan.topology_id, ports)
    return failure.value


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"encode_extra": "--quantization fp8"}, "cannot run it: --quantization fp8"),
        # never a silent swap: the encode worker hard-codes LLaVA, whatever `--model` said
        (
            {"encode_model": "llava-hf/llava-1.5-7b-hf"},
            "starts model 'llava-hf/llava-1.5-7b-hf', not 'Qwen/Qwen3-VL-2B-Instruct', the model "
            "of profile epd_qwen3-vl-2b",
        ),
    ],
    ids=["unmapped_flag", "another_model"],
)
def test_a_role_the_tier_cannot_run_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, str], named: str
) -> None:
    failure = launch_failure(monkeypatch, build_checkout(tmp_path / "dynamo", **change))
    assert failure.cause == Cause.LAUNCHER_INVALID, failure.report()
    assert failure.evidence.role == "encode"
    assert named in failure.message


@pytest.mark.parametrize(
    ("fault", "role", "component"),
    [
        (ENCODE_NEVER_REGISTERS, "encode", "encode"),
        pytest.param(DECODE_NEVER_REGISTERS, "decode", "backend", marks=EXHAUSTIVE),
    ],
    ids=["encode", "decode"],
)
def test_a_worker_that_serves_but_registers_no_model_card_is_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: tuple[str, str, str],
    role: str,
    component: str,
) -> None:
    """The second seed's class, in the checkout's Python: the worker is healthy and its endpoint
    is registered, but its model card never is. Named by role within listing_grace_s of the
    last worker turning healthy, with the cards present and what the frontend still needs."""
    failure = launch_failure(monkeypatch, build_checkout(tmp_path / "dynamo", python_fault=fault))
    assert failure.cause == Cause.NEVER_REGISTERED, failure.report()
    assert failure.evidence.role == role, failure.report()
    assert f"role '{role}' registered its endpoint but no model card" in failure.message
    assert "every role registered" not in failure.message
    cards = failure.evidence.detail["cards"]
    assert isinstance(cards, list), cards
    assert cards and not any(c.startswith(f"{component}:") for c in cards), cards
    assert "the frontend still needs" in failure.message, failure.message
