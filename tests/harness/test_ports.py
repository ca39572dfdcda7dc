"""Port registry: real sockets, real owner processes, and a multi-process stress run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.machine.port_registry import PortRangeExhausted, PortRegistry, port_is_bindable

REPO_ROOT = Path(__file__).resolve().parents[2]
# Below the kernel's ephemeral range (32768+) and outside the harness default (20000-30000).
TEST_LOW = 31000

SQUATTER = textwrap.dedent(
    """
    import socket, sys
    sockets = []
    for i, port in enumerate(int(p) for p in sys.argv[1:]):
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        if i % 2 == 0:
            sock.listen()
        sockets.append(sock)
    print("ready", flush=True)
    sys.stdin.read()
    """
)

LEASE_AND_EXIT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from harness.machine.port_registry import PortRegistry
    registry = PortRegistry(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(registry.lease(["a", "b"], tag="dies-holding").ports), flush=True)
    """
)

STRESS_WORKER = textwrap.dedent(
    """
    import json, os, random, sys, time
    from pathlib import Path
    from harness.machine.port_registry import PortRegistry
    path, low, high, count, window, out = sys.argv[1:]
    registry = PortRegistry(Path(path), int(low), int(high))
    held, intervals, lease_s = [], [], []
    def give_back(lease, leased_at):
        released_at = time.monotonic()
        intervals.extend([port, leased_at, released_at] for port in lease.ports.values())
        lease.release()
    for _ in range(int(count)):
        t0 = time.monotonic()
        lease = registry.lease(["frontend", "encode", "decode"], tag=f"stress-{os.getpid()}")
        lease_s.append(time.monotonic() - t0)
        held.append((lease, time.monotonic()))
        if len(held) > int(window):
            give_back(*held.pop(random.randrange(len(held))))
    for lease, leased_at in held:
        give_back(lease, leased_at)
    Path(out).write_text(json.dumps({"intervals": intervals, "lease_s": lease_s}))
    """
)


def free_ports(low: int, count: int) -> list[int]:
    """`count` ports from `low` up that are bindable now (skips whatever this machine uses)."""
    ports = [p for p in range(low, low + 10 * count) if port_is_bindable(p)]
    assert len(ports) >= count, f"too few free ports above {low} on this machine"
    return ports[:count]


def python(code: str, *args: object, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], env=env, text=True, **kwargs
    )


@contextmanager
def squatting(ports: list[int]) -> Iterator[subprocess.Popen[str]]:
    """A foreign process holding `ports` (even ones listening, odd ones only bound)."""
    proc = python(SQUATTER, *ports, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.fixture
def registry_path(tmp_path: Path) -> Path:
    return tmp_path / "ports.json"


def test_lease_hands_out_distinct_ports_in_range_and_release_returns_them(
    registry_path: Path,
) -> None:
    registry = PortRegistry(registry_path, TEST_LOW, TEST_LOW + 999)
    with registry.lease(["frontend", "encode", "decode"], tag="case-a") as lease:
        assert set(lease.ports) == {"frontend", "encode", "decode"}
        assert len(set(lease.ports.values())) == 3
        assert all(TEST_LOW <= p <= TEST_LOW + 999 for p in lease.ports.values())
        records = registry.leases()
        assert {r.port for r in records} == set(lease.ports.values())
        assert {(r.owner_pid, r.tag) for r in records} == {(os.getpid(), "case-a")}
        other = registry.lease(["frontend"])
        assert other.ports["frontend"] not in lease.ports.values()
        other.release()
    assert registry.leases() == []
    assert json.loads(registry_path.read_text()) == []


def test_lease_skips_ports_foreign_processes_listen_on_or_hold(registry_path: Path) -> None:
    listened, bound, free = free_ports(TEST_LOW + 1000, 3)
    registry = PortRegistry(registry_path, min(listened, bound, free), max(listened, bound, free))
    others = [p for p in range(registry.low, registry.high + 1) if p not in (listened, bound, free)]
    with squatting([listened, bound, *others]):
        lease = registry.lease(["only"])
        assert lease.ports == {"only": free}
        with pytest.raises(PortRangeExhausted, match=r"held by other processes"):
            registry.lease(["second"])
        lease.release()


def test_dead_owners_leases_are_reclaimed_at_once(registry_path: Path) -> None:
    low = free_ports(TEST_LOW + 2000, 1)[0]
    high = low + 1
    assert port_is_bindable(high)
    child = python(LEASE_AND_EXIT, registry_path, low, high, stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=30)
    assert sorted(json.loads(out).values()) == [low, high]
    assert {r["tag"] for r in json.loads(registry_path.read_text())} == {"dies-holding"}

    registry = PortRegistry(registry_path, low, high)
    with registry.lease(["x", "y"]) as lease:  # the whole range: only possible after reclaim
        assert sorted(lease.ports.values()) == [low, high]


def test_lease_for_another_owner_pid_ends_with_that_process(registry_path: Path) -> None:
    registry = PortRegistry(registry_path, TEST_LOW, TEST_LOW + 999)
    owner = subprocess.Popen(["sleep", "30"])
    try:
        lease = registry.lease(["frontend"], owner_pid=owner.pid)
        assert [r.owner_pid for r in registry.leases()] == [owner.pid]
    finally:
        owner.kill()
        owner.wait()
    assert registry.leases() == []
    lease.release()  # releasing an already reclaimed lease is harmless


def test_reused_pid_does_not_keep_a_lease_alive(registry_path: Path) -> None:
    registry = PortRegistry(registry_path, TEST_LOW, TEST_LOW + 999)
    registry.lease(["frontend"])
    records = json.loads(registry_path.read_text())
    records[0]["owner_started"] -= 1000.0  # same pid, different process
    registry_path.write_text(json.dumps(records))
    assert registry.leases() == []


def test_exhausted_range_error_names_range_and_request(registry_path: Path) -> None:
    low = free_ports(TEST_LOW + 3000, 1)[0]
    registry = PortRegistry(registry_path, low, low + 2)
    with pytest.raises(PortRangeExhausted) as raised:
        registry.lease(["frontend", "encode", "prefill", "decode"])
    message = str(raised.value)
    assert "requested 4 ports (frontend, encode, prefill, decode)" in message
    assert f"127.0.0.1:{low}-{low + 2}" in message
    assert registry.leases() == []


def test_stress_parallel_workers_never_collide_or_leak(registry_path: Path) -> None:
    """8 processes x 200 leases of 3 ports in a 200-port range where 50 ports are squatted."""
    workers, per_worker, window, span = 8, 200, 4, 200
    low = TEST_LOW + 4000
    squatted = [p for p in range(low, low + span, 4) if port_is_bindable(p)]
    outputs = [registry_path.parent / f"worker-{i}.json" for i in range(workers)]
    with squatting(squatted):
        started = time.monotonic()
        procs = [
            python(STRESS_WORKER, registry_path, low, low + span - 1, per_worker, window, out)
            for out in outputs
        ]
        codes = [p.wait(timeout=120) for p in procs]
        elapsed = time.monotonic() - started
    assert codes == [0] * workers

    intervals: list[tuple[int, float, float]] = []
    lease_s: list[float] = []
    for out in outputs:
        result = json.loads(out.read_text())
        intervals.extend(tuple(i) for i in result["intervals"])
        lease_s.extend(result["lease_s"])
    assert len(intervals) == workers * per_worker * 3
    handed = {port for port, _, _ in intervals}
    assert handed.isdisjoint(squatted)
    assert all(low <= p < low + span for p in handed)

    collisions = 0
    last_release: dict[int, float] = {}
    for port, leased_at, released_at in sorted(intervals, key=lambda i: (i[0], i[1])):
        if leased_at < last_release.get(port, float("-inf")):
            collisions += 1
        last_release[port] = max(released_at, last_release.get(port, float("-inf")))
    assert collisions == 0
    assert json.loads(registry_path.read_text()) == []  # raw file: nothing left to reclaim
    lease_s.sort()
    p50_ms, p99_ms = (lease_s[int(len(lease_s) * q)] * 1000 for q in (0.5, 0.99))
    print(
        f"\nstress: {workers}x{per_worker} leases, {len(squatted)} squatted, {len(handed)} "
        f"distinct ports, collisions={collisions}, leaked=0, wall={elapsed:.1f}s, "
        f"lease p50={p50_ms:.1f}ms p99={p99_ms:.1f}ms"
    )
