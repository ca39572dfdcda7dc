"""Machine-wide port leases: every xdist worker and checkout draws 127.0.0.1 ports from one file.

A port is handed out only if no live lease holds it and a bind on 127.0.0.1 succeeds right now
(so ports that foreign processes listen on or hold are skipped). Leases of dead owners are
reclaimed at the next registry access."""

from __future__ import annotations

import random
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.machine.leases import HeldLease, LeaseFile, NewLease, OwnedLease, registry_path

REGISTRY_ENV = "HARNESS_PORT_REGISTRY"


def registry_file() -> Path:
    """The machine's port lease file: $HARNESS_PORT_REGISTRY, else /tmp/serve-harness/ports.json."""
    return registry_path(REGISTRY_ENV, "ports.json")


BIND_HOST = "127.0.0.1"


class PortLeaseRecord(OwnedLease):
    """One leased port as stored in the registry file."""

    port: int
    name: str
    leased_at: float


class PortRangeExhausted(RuntimeError):
    """Not enough free ports in the registry's range."""


def port_is_bindable(port: int) -> bool:
    """True if a socket can bind 127.0.0.1:`port` now (no listener, holder or TIME_WAIT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((BIND_HOST, port))
        except OSError:
            return False
    return True


@dataclass
class PortLease(HeldLease):
    """Ports leased under one id, by name (e.g. {"frontend": 20113, "encode": 20114})."""

    ports: dict[str, int]
    lease_id: str
    registry: PortRegistry = field(repr=False)
    released: bool = False

    def _give_back(self) -> None:
        self.registry.release(self)


class PortRegistry:
    """Port leases in [low, high] recorded in a JSON file shared by every process on the machine.

    Default file: $HARNESS_PORT_REGISTRY, else /tmp/serve-harness/ports.json.
    """

    def __init__(self, path: Path | None = None, low: int = 20000, high: int = 30000) -> None:
        if not 1024 <= low <= high <= 65535:
            raise ValueError(f"port range {low}-{high} must lie within 1024-65535 with low <= high")
        self.path = path or registry_file()
        self.low = low
        self.high = high
        self._file = LeaseFile(self.path, PortLeaseRecord)

    def lease(self, names: list[str], owner_pid: int | None = None, tag: str = "") -> PortLease:
        """Lease one port per name for `owner_pid` (default: this process), all or nothing."""
        if len(set(names)) != len(names):
            raise ValueError(f"port names must be distinct, got {names}")
        new = NewLease.for_owner(owner_pid)
        with self._file.transaction() as records:
            taken = {r.port for r in records}
            ports, busy = self._pick_free(len(names), taken)
            if len(ports) < len(names):
                raise PortRangeExhausted(
                    f"requested {len(names)} ports ({', '.join(names)}) but only {len(ports)} "
                    f"are free in {BIND_HOST}:{self.low}-{self.high}: {len(taken)} leased in "
                    f"{self.path}, {busy} held by other processes. Release leases, widen "
                    "low/high, or point HARNESS_PORT_REGISTRY at another file."
                )
            now = time.time()
            records.extend(
                PortLeaseRecord(**new.fields(tag), port=port, name=name, leased_at=now)  # type: ignore[arg-type]
                for name, port in zip(names, ports, strict=True)
            )
        return PortLease(dict(zip(names, ports, strict=True)), new.lease_id, self)

    def release(self, lease: PortLease | str) -> None:
        """Drop every record of a lease (a `PortLease` or its id); unknown ids are ignored."""
        lease_id = lease if isinstance(lease, str) else lease.lease_id
        self._file.release(lease_id)

    def leases(self) -> list[PortLeaseRecord]:
        """Live lease records (reclaiming those of dead owners)."""
        return self._file.live_records()

    def _pick_free(self, count: int, taken: set[int]) -> tuple[list[int], int]:
        """Up to `count` bindable untaken ports scanning from a random start; also busy count."""
        span = self.high - self.low + 1
        start = random.randrange(span)
        picked: list[int] = []
        busy = 0
        for offset in range(span):
            port = self.low + (start + offset) % span
            if port in taken:
                continue
            if port_is_bindable(port):
                picked.append(port)
                if len(picked) == count:
                    break
            else:
                busy += 1
        return picked, busy
