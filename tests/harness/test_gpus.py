"""GPU inventory, lease broker (simulated 4x80 runner), memory-return wait and case ordering."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.resources.gpus import (
    GpuInventory,
    GpuLeaseBroker,
    GpuLeaseTimeout,
    GpuMemoryNotReturned,
    choose_gpus,
    wait_memory_returned,
)
from harness.suite.case_order import LongestFirst

GIB = 1024


@pytest.fixture
def broker(tmp_path: Path) -> GpuLeaseBroker:
    return GpuLeaseBroker(GpuInventory.from_spec("4x80"), tmp_path / "gpus.json")


def test_inventory_from_spec_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = GpuInventory.from_spec("4x80")
    assert [d.index for d in inventory.devices] == [0, 1, 2, 3]
    assert {d.total_mib for d in inventory.devices} == {80 * GIB}
    monkeypatch.setenv("HARNESS_GPUS", "2x24")
    assert [d.total_mib for d in GpuInventory.detect().devices] == [24 * GIB, 24 * GIB]
    with pytest.raises(ValueError, match=r"HARNESS_GPUS='four' is not COUNTxGIB"):
        GpuInventory.from_spec("four")


def test_broker_hands_out_distinct_gpus_until_full(broker: GpuLeaseBroker) -> None:
    leases = [broker.acquire(1, 80, timeout_s=1, tag=f"case-{i}") for i in range(4)]
    assert sorted(i for lease in leases for i in lease.indices) == [0, 1, 2, 3]
    with pytest.raises(GpuLeaseTimeout, match=r"no 1 GPU\(s\) with 10 GiB.*GPU 0: 80 GiB by pid"):
        broker.acquire(1, 10, timeout_s=0.2, tag="fifth")
    for lease in leases:
        lease.release()
    with broker.acquire(4, 80, timeout_s=1) as everything:
        assert everything.cuda_visible_devices == "0,1,2,3"
        assert everything.env()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert broker.leases() == []


def test_broker_respects_vram_and_packs_small_cases(broker: GpuLeaseBroker) -> None:
    first = broker.acquire(1, 50, timeout_s=1)
    second = broker.acquire(1, 50, timeout_s=1)
    assert first.indices != second.indices  # 50 + 50 GiB does not fit one 80 GiB GPU
    small = broker.acquire(1, 30, timeout_s=1)
    assert small.indices[0] in first.indices + second.indices  # best fit: fills a partial GPU
    pair = broker.acquire(2, 80, timeout_s=1)
    assert set(pair.indices).isdisjoint(first.indices + second.indices)
    with pytest.raises(GpuLeaseTimeout):
        broker.acquire(1, 40, timeout_s=0.2)  # 30 GiB left at most
    with pytest.raises(ValueError, match=r"can never provide"):
        broker.acquire(1, 81, timeout_s=1)
    with pytest.raises(ValueError, match=r"wants 5 GPU\(s\)"):
        broker.acquire(5, 1, timeout_s=1)


def test_acquire_waits_for_a_release(broker: GpuLeaseBroker) -> None:
    holder = broker.acquire(4, 60, timeout_s=1)
    timer = threading.Timer(0.4, holder.release)
    timer.start()
    started = time.monotonic()
    with broker.acquire(2, 40, timeout_s=10) as waited:
        assert time.monotonic() - started >= 0.35
        assert len(waited.indices) == 2
    timer.join()


def test_dead_owners_gpus_are_reclaimed(broker: GpuLeaseBroker) -> None:
    owner = subprocess.Popen(["sleep", "0.5"])
    try:
        broker.acquire(4, 80, owner_pid=owner.pid, timeout_s=1, tag="dies-holding")
        assert {r.owner_pid for r in broker.leases()} == {owner.pid}
        started = time.monotonic()
        with broker.acquire(4, 80, timeout_s=10) as lease:
            assert lease.indices == [0, 1, 2, 3]
            assert time.monotonic() - started >= 0.2
    finally:
        owner.kill()
        owner.wait()


def test_choose_gpus_best_fit_example() -> None:
    devices = GpuInventory.from_spec("2x80").devices
    assert choose_gpus(devices, {0: 60 * GIB}, 1, 16 * GIB) == [0]
    assert choose_gpus(devices, {0: 70 * GIB}, 1, 16 * GIB) == [1]
    assert choose_gpus(devices, {0: 70 * GIB}, 2, 16 * GIB) is None


class ScriptedMemory:
    """A GpuMemoryProbe whose readings follow a script: used MiB per call, last value repeats."""

    def __init__(self, readings: dict[int, list[float]]) -> None:
        self.readings = readings

    def used_mib(self, index: int) -> float:
        script = self.readings[index]
        return script.pop(0) if len(script) > 1 else script[0]

    def holders(self, index: int) -> list[str]:
        return [f"pid 4242 (python -m dynamo.vllm) on GPU {index}"]


def test_wait_memory_returned_waits_then_passes() -> None:
    probe = ScriptedMemory({0: [30000, 9000, 600], 1: [500]})
    wait_memory_returned([0, 1], {0: 500, 1: 500}, tolerance_mib=256, timeout_s=5, probe=probe)
    assert probe.readings[0] == [600]


def test_wait_memory_returned_names_gpu_and_holders() -> None:
    probe = ScriptedMemory({0: [500], 1: [20000]})
    with pytest.raises(GpuMemoryNotReturned) as raised:
        wait_memory_returned([0, 1], {0: 500, 1: 500}, 256, timeout_s=0.3, probe=probe)
    message = str(raised.value)
    assert "GPU 1: 20000 MiB used vs baseline 500 MiB" in message
    assert "pid 4242 (python -m dynamo.vllm)" in message
    assert "GPU 0" not in message


def test_longest_first_orders_by_known_duration_with_default_for_unknown() -> None:
    order = LongestFirst({"t::a": 60, "t::b": 600, "t::d": 300}, default_s=300)
    assert order.order(["t::a", "t::b", "t::c", "t::d"]) == ["t::b", "t::c", "t::d", "t::a"]


def test_nvml_inventory_when_a_driver_is_present() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        inventory = GpuInventory.from_nvml()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver: {exc}")
    assert inventory.devices
    assert all(0 < d.free_mib <= d.total_mib for d in inventory.devices)
