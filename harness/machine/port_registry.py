"""Ports, leased machine-wide: every xdist worker and checkout draws 127.0.0.1 ports from one
`LeaseFile`. A port is handed out only if no live lease holds it and a bind on 127.0.0.1
succeeds right now."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.machine.lease_file import HeldLease, LeaseFile, NewLease, OwnedLease, registry_path

PORT_REGISTRY_ENV = "HARNESS_PORT_REGISTRY"


def port_registry_file() -> Path:
    """The machine's port lease file: $HARNESS_PORT_REGISTRY, else /tmp/serve-harness/ports.json."""
    return registry_path(PORT_REGISTRY_ENV, "ports.json")


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
        self.path = path or port_registry_file()
        self.low = low
        self.high = high
        self._file = LeaseFile(self.path, PortLeaseRecord)

    def lease(
        self,
        names: list[str],
        owner_pid: int | None = None,
        tag: str = "",
        runs: Sequence[Sequence[str]] = (),
    ) -> PortLease:
        """Lease one port per name for `owner_pid` (default: this process), all or nothing.
        Each of `runs` is leased as consecutive ports, its names in order (a launcher that
        offsets ports from a base, `$((BASE + i - 1))`, stays inside its lease)."""
        every = [*names, *(name for run in runs for name in run)]
        if len(set(every)) != len(every):
            raise ValueError(f"port names must be distinct, got {every}")
        new = NewLease.for_owner(owner_pid)
        with self._file.transaction() as records:
            taken = {r.port for r in records}
            leased: dict[str, int] = {}
            busy = 0
            for run in runs:
                start = self._pick_run(len(run), taken)
                if start is None:
                    raise PortRangeExhausted(
                        f"no {len(run)} consecutive free ports for {', '.join(run)} in "
                        f"{BIND_HOST}:{self.low}-{self.high} ({len(taken)} leased in "
                        f"{self.path}). Release leases, widen low/high, or point "
                        "HARNESS_PORT_REGISTRY at another file."
                    )
                leased.update({name: start + i for i, name in enumerate(run)})
                taken |= set(range(start, start + len(run)))
            ports, busy = self._pick_free(len(names), taken)
            if len(ports) < len(names):
                raise PortRangeExhausted(
                    f"requested {len(names)} ports ({', '.join(names)}) but only {len(ports)} "
                    f"are free in {BIND_HOST}:{self.low}-{self.high}: {len(taken)} leased in "
                    f"{self.path}, {busy} held by other processes. Release leases, widen "
                    "low/high, or point HARNESS_PORT_REGISTRY at another file."
                )
            leased.update(zip(names, ports, strict=True))
            now = time.time()
            records.extend(
                PortLeaseRecord(**new.fields(tag), port=port, name=name, leased_at=now)
                for name, port in leased.items()
            )
        return PortLease({name: leased[name] for name in every}, new.lease_id, self)

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

    def _pick_run(self, count: int, taken: set[int]) -> int | None:
        """The first port of `count` consecutive bindable untaken ports, from a random start."""
        span = self.high - self.low + 2 - count
        if span <= 0:
            return None
        start = random.randrange(span)
        for offset in range(span):
            first = self.low + (start + offset) % span
            run = range(first, first + count)
            if not taken.intersection(run) and all(port_is_bindable(p) for p in run):
                return first
        return None
