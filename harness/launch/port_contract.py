"""The ports one launch is handed: upstream Dynamo's serve-test port contract filled with leased
ports, plus what the launcher's text hints at.

Upstream's serve tests hand a launcher of N workers (tests/serve/test_port_contract.py):
`DYN_MANAGED_PORTS=1`, `DYN_HTTP_PORT`, `DYN_SYSTEM_PORT1..N` with the unindexed
`DYN_SYSTEM_PORT` equal to the first, `DYN_VLLM_KV_EVENT_PORT1..N` and
`DYN_VLLM_NIXL_SIDE_CHANNEL_PORT1..N`. The harness exports all of them, and more, so a launcher
written to any of upstream's shapes finds its ports however it reads them:

- `DYN_VLLM_KV_EVENT_PORT1..N` are consecutive, and the unindexed `DYN_VLLM_KV_EVENT_PORT` is the
  first of them (a launcher that offsets from it, `$((DYN_VLLM_KV_EVENT_PORT + i - 1))`, stays
  inside the lease);
- SGLang topologies also get `SGLANG_NCCL_PORT1..N`: SGLang's torch rendezvous port, which the
  role adapter passes as `--nccl-port` where a launcher gives none;
- a variable the launcher's text reads (`harness/profiles/launchers.py`) is leased too: a `*_BASE`
  one as a run of 2N consecutive ports (upstream's launchers offset workers from a base by 1 or 2).

The text is only a hint for what to lease: which port a role really got is what the role adapter
sees at exec (harness/launch/role_adapter.py), and a port nobody leased is refused there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.core.role_contract import FRONTEND_PORT_ENV, SYSTEM_PORT_ENV
from harness.profiles import RoleSpec
from harness.profiles.launchers import launcher_port_vars

FRONTEND_PORT = FRONTEND_PORT_ENV  # dynamo.frontend reads it itself
SYSTEM_PORT = SYSTEM_PORT_ENV
KV_EVENT_PORT = "DYN_VLLM_KV_EVENT_PORT"
NIXL_SIDE_CHANNEL_PORT = "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT"
SGLANG_NCCL_PORT = "SGLANG_NCCL_PORT"
EVENT_BROKER_PORTS = ("ZMQ_XSUB_PORT", "ZMQ_XPUB_PORT")
MANAGED = {"DYN_MANAGED_PORTS": "1"}
# Per worker offsets a `*_BASE` variable covers: upstream's launchers step by 1 (KV events) or by
# 2 (system ports: `$((BASE + (i - 1) * 2))`).
BASE_STRIDE = 2


def indexed(prefix: str, count: int) -> list[str]:
    """The indexed names of a per-worker port.

    >>> indexed("DYN_SYSTEM_PORT", 2)
    ['DYN_SYSTEM_PORT1', 'DYN_SYSTEM_PORT2']
    """
    return [f"{prefix}{i}" for i in range(1, count + 1)]


@dataclass(frozen=True)
class PortContract:
    """What is leased (`singles` one port each, `runs` consecutive ports) and what is exported
    as another name's port (`aliases`: alias -> the leased name)."""

    singles: tuple[str, ...]
    runs: tuple[tuple[str, ...], ...]
    aliases: Mapping[str, str]

    @property
    def names(self) -> list[str]:
        return [*self.singles, *(name for run in self.runs for name in run)]

    def env(self, ports: Mapping[str, int]) -> dict[str, str]:
        """The launcher's port environment: every leased port, its aliases, the managed switch."""
        env = {name: str(port) for name, port in ports.items() if name.isidentifier()}
        env |= {alias: env[name] for alias, name in self.aliases.items() if name in env}
        return env | MANAGED


def port_contract(worker_roles: Sequence[RoleSpec], stack: str, launcher_text: str) -> PortContract:
    """The ports a launch of these workers on `stack` is handed; `launcher_text`: the launcher
    and what it uses."""
    workers = len(worker_roles)
    health = [r.health_port for r in worker_roles if r.health_port]
    system = list(dict.fromkeys([*indexed(SYSTEM_PORT, workers), *health]))
    per_worker = [*system, *indexed(NIXL_SIDE_CHANNEL_PORT, workers)]
    if stack == "dynamo-sglang":
        per_worker += indexed(SGLANG_NCCL_PORT, workers)
    kv_events = tuple(indexed(KV_EVENT_PORT, workers))
    aliases = {SYSTEM_PORT: system[0], KV_EVENT_PORT: kv_events[0]} if workers else {}
    known = {FRONTEND_PORT, *per_worker, *kv_events, *aliases, *EVENT_BROKER_PORTS}
    hinted = [name for name in launcher_port_vars(launcher_text) if name not in known]
    bases = [name for name in hinted if name.endswith("_BASE")]
    runs = [kv_events] if workers else []
    runs += [(base, *(f"{base}+{i}" for i in range(1, BASE_STRIDE * workers))) for base in bases]
    singles = [FRONTEND_PORT, *per_worker, *(h for h in hinted if h not in bases)]
    return PortContract(
        tuple([*singles, *EVENT_BROKER_PORTS]), tuple(tuple(r) for r in runs), aliases
    )


def offered_to_all(name: str) -> bool:
    """A port the contract hands every launcher, whether or not it uses it (upstream's
    per-worker ports and ours, a base's further ports): none need be consumed."""
    prefixes = (SYSTEM_PORT, KV_EVENT_PORT, NIXL_SIDE_CHANNEL_PORT, SGLANG_NCCL_PORT)
    return "+" in name or any(re.fullmatch(rf"{p}\d+", name) for p in prefixes)
