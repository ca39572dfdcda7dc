"""What a launch is handed (upstream's serve-test port contract, leased), and how the role adapter
names a role and checks its ports from what it received at exec, not from the launcher's text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.launch.port_contract import offered_to_all, port_contract
from harness.launch.role_adapter import Refused, adapt
from harness.machine.port_registry import PortRegistry
from harness.profiles import RoleSpec, load_profiles

PROFILES = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}


def workers_of(name: str) -> tuple[list[RoleSpec], str]:
    return PROFILES[name].worker_roles, PROFILES[name].stack


def test_the_contract_is_upstreams_for_every_worker_whatever_the_text_reads() -> None:
    contract = port_contract(*workers_of("epd_qwen3-vl-2b"), "")
    names = contract.names
    for prefix in ("DYN_SYSTEM_PORT", "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT", "DYN_VLLM_KV_EVENT_PORT"):
        assert [f"{prefix}{i}" for i in (1, 2, 3)] == [n for n in names if n[:-1] == prefix]
    assert "DYN_HTTP_PORT" in names and "SGLANG_NCCL_PORT1" not in names
    ports = {name: 21000 + i for i, name in enumerate(names)}
    env = contract.env(ports)
    assert env["DYN_SYSTEM_PORT"] == env["DYN_SYSTEM_PORT1"]  # upstream's alias of worker 1
    assert env["DYN_VLLM_KV_EVENT_PORT"] == env["DYN_VLLM_KV_EVENT_PORT1"]
    kv = [int(env[f"DYN_VLLM_KV_EVENT_PORT{i}"]) for i in (1, 2, 3)]
    assert contract.runs[0] == (
        "DYN_VLLM_KV_EVENT_PORT1",
        "DYN_VLLM_KV_EVENT_PORT2",
        "DYN_VLLM_KV_EVENT_PORT3",
    )
    assert kv == sorted(kv)
    assert env["DYN_MANAGED_PORTS"] == "1"
    sglang = port_contract(*workers_of("sglang_e_pd_qwen3-vl-2b"), "").names
    assert {"SGLANG_NCCL_PORT1", "SGLANG_NCCL_PORT2"} <= set(sglang)


def test_a_base_the_text_reads_is_leased_as_a_run_and_other_hints_singly() -> None:
    text = 'B="${KV_EVENTS_PORT_BASE:-29090}"; P=${DYN_DISAGG_BOOTSTRAP_PORT:-12345}'
    contract = port_contract(*workers_of("sglang_agg_router_qwen3-vl-2b"), text)
    [run] = [r for r in contract.runs if r[0] == "KV_EVENTS_PORT_BASE"]
    assert len(run) == 4  # two workers, offsets of 1 or 2 per worker
    assert "DYN_DISAGG_BOOTSTRAP_PORT" in contract.singles
    env = contract.env({name: 22000 + i for i, name in enumerate(contract.names)})
    assert "KV_EVENTS_PORT_BASE" in env and not any("+" in name for name in env)
    assert offered_to_all("KV_EVENTS_PORT_BASE+1") and offered_to_all("DYN_SYSTEM_PORT2")
    assert not offered_to_all("DYN_DISAGG_BOOTSTRAP_PORT")


def test_a_run_is_leased_as_consecutive_ports(tmp_path: Path) -> None:
    registry = PortRegistry(tmp_path / "ports.json", 23000, 23100)
    lease = registry.lease(["A", "B"], runs=[("R1", "R2", "R3")])
    run = [lease.ports[n] for n in ("R1", "R2", "R3")]
    assert run == list(range(run[0], run[0] + 3))
    assert len(set(lease.ports.values())) == 5
    with pytest.raises(ValueError, match="distinct"):
        registry.lease(["A"], runs=[("A",)])
    lease.release()


LEASED = {
    "21001": "DYN_SYSTEM_PORT1",
    "21002": "DYN_SYSTEM_PORT2",
    "21011": "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT1",
    "21012": "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT2",
    "21021": "SGLANG_NCCL_PORT1",
    "21022": "SGLANG_NCCL_PORT2",
    "21000": "DYN_HTTP_PORT",
}


def environ(**extra: str) -> dict[str, str]:
    """A role's environment under the harness: the P/D profile's two workers."""
    return {
        "HARNESS_DEVICE": "gpu",
        "HARNESS_ROLE_PORTS": json.dumps(
            {"DYN_SYSTEM_PORT1": "prefill", "DYN_SYSTEM_PORT2": "decode"}
        ),
        "HARNESS_LEASED_PORTS": json.dumps(LEASED),
        "HARNESS_PROFILE_MODEL": "M",
        "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT2": "21012",
        "SGLANG_NCCL_PORT2": "21022",
        **extra,
    }


KV = ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']


def test_a_role_is_named_by_the_leased_system_port_it_received() -> None:
    """However the launcher computed it (a loop, indirect expansion), the value names the role;
    a vLLM worker with a KV connector and no side-channel port gets its leased one."""
    out = adapt(["-m", "dynamo.vllm", "--model", "M", *KV], environ(DYN_SYSTEM_PORT="21002"))
    assert out.role == "decode"
    assert out.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "21012"
    assert out.ports == {"DYN_SYSTEM_PORT": 21002, "VLLM_NIXL_SIDE_CHANNEL_PORT": 21012}
    sglang = adapt(["-m", "dynamo.sglang", "--model-path", "M"], environ(DYN_SYSTEM_PORT="21002"))
    assert sglang.argv[-2:] == ["--nccl-port", "21022"]


@pytest.mark.parametrize(
    ("argv", "env", "says", "port"),
    [
        (
            ["-m", "dynamo.vllm", "--model", "M"],
            {},
            "has no system port (DYN_SYSTEM_PORT unset;",
            None,
        ),
        (
            ["-m", "dynamo.vllm", "--model", "M"],
            {"DYN_SYSTEM_PORT": "8081"},
            "system port DYN_SYSTEM_PORT=8081, which nobody leased",
            8081,
        ),
        (
            ["-m", "dynamo.vllm", "--model", "M"],
            {"DYN_SYSTEM_PORT": "21011"},
            "(DYN_VLLM_NIXL_SIDE_CHANNEL_PORT1, which no worker role names)",
            None,
        ),
        (
            ["-m", "dynamo.vllm", "--model", "M", *KV],
            {"DYN_SYSTEM_PORT": "21001", "VLLM_NIXL_SIDE_CHANNEL_PORT": "20098"},
            "would bind port 20098 (VLLM_NIXL_SIDE_CHANNEL_PORT), which nobody leased",
            20098,
        ),
        (
            [
                "-m",
                "dynamo.sglang",
                "--model-path",
                "M",
                "--kv-events-config",
                '{"publisher":"zmq","endpoint":"tcp://*:29090"}',
            ],
            {"DYN_SYSTEM_PORT": "21001"},
            "would bind port 29090 (--kv-events-config), which nobody leased",
            29090,
        ),
        (
            ["-m", "dynamo.frontend", "--http-port", "8000"],
            {},
            "would bind port 8000 (--http-port), which nobody leased",
            8000,
        ),
    ],
    ids=[
        "no_system_port",
        "unleased_system_port",
        "leased_but_no_role",
        "fixed_nixl_port",
        "fixed_kv_events",
        "fixed_http_port",
    ],
)
def test_only_what_is_truly_wrong_is_refused(
    argv: list[str], env: dict[str, str], says: str, port: int | None
) -> None:
    with pytest.raises(Refused) as refused:
        adapt(argv, environ(**env))
    assert says in str(refused.value)
    assert refused.value.port == port
