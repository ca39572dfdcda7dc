"""GPU inventory (simulated, restricted by the runner, MIG refused), byte leases, memory return."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cases.selection import LongestFirst
from harness.machine.gpu_leases import (
    GpuLeaseBroker,
    GpuLeaseTimeout,
    GpuUnavailable,
    place,
    shortfall,
)
from harness.machine.gpus import (
    GIB,
    MIB,
    GpuDevice,
    GpuInventory,
    GpuMemoryNotReturned,
    wait_memory_returned,
)


@pytest.fixture
def broker(tmp_path: Path) -> GpuLeaseBroker:
    return GpuLeaseBroker(GpuInventory.from_spec("4x80"), tmp_path / "gpus.json")


def test_inventory_from_spec_env_and_marketing_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = GpuInventory.from_spec("4x80")
    assert [d.index for d in inventory.devices] == [0, 1, 2, 3]
    assert {d.total_bytes for d in inventory.devices} == {80 * GIB}
    rtx4090 = GpuInventory.from_spec("1x24564MiB").devices[0]
    assert rtx4090.total_bytes == 24564 * MIB < 24 * GIB  # a "24 GB" card is not 24 GiB
    monkeypatch.setenv("HARNESS_GPUS", "2x24")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    assert [d.total_bytes for d in GpuInventory.detect().devices] == [24 * GIB, 24 * GIB]
    with pytest.raises(ValueError, match=r"HARNESS_GPUS='four' is not COUNTxSIZE"):
        GpuInventory.from_spec("four")


@pytest.mark.parametrize(
    ("env", "value", "kept", "refused"),
    [
        ("CUDA_VISIBLE_DEVICES", "1,3", [1, 3], ""),
        ("CUDA_VISIBLE_DEVICES", "GPU-sim-2", [2], ""),
        ("NVIDIA_VISIBLE_DEVICES", "0", [0], ""),
        ("NVIDIA_VISIBLE_DEVICES", "all", [0, 1, 2, 3], ""),
        ("CUDA_VISIBLE_DEVICES", "", [], "hides every GPU"),
        ("CUDA_VISIBLE_DEVICES", "MIG-1a2b", [], "names MIG instance MIG-1a2b"),
        ("CUDA_VISIBLE_DEVICES", "7", [], "names 7, which is not among the GPUs seen"),
    ],
)
def test_runner_visible_devices_restrict_the_inventory(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, kept: list[int], refused: str
) -> None:
    monkeypatch.setenv("HARNESS_GPUS", "4x80")
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(env, value)
    inventory, source = GpuInventory.detect_with_source()
    assert [d.index for d in inventory.devices] == kept
    assert refused in " ".join(inventory.refused)
    if value != "all":
        assert f"restricted by {env}=" in source


class FakeNvmlWithMig:
    """Stands in for pynvml to inject a fault no GPU here can be put in: GPU 1 in MIG mode."""

    NVML_DEVICE_MIG_ENABLE = 1

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        return (1, 1) if handle == 1 else (0, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * GIB, free=79 * GIB, used=GIB)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-fake-{handle}"


def test_a_gpu_in_mig_mode_is_refused_with_the_fix() -> None:
    inventory = GpuInventory.from_nvml(FakeNvmlWithMig())
    assert [d.index for d in inventory.devices] == [0]
    assert inventory.refused == (
        "GPU 1 (NVIDIA A100-SXM4-80GB) is in MIG mode: the harness leases whole GPUs; disable "
        "MIG (nvidia-smi -i 1 -mig 0) or run on a non-MIG GPU",
    )


def test_placement_fits_bytes_and_best_fits() -> None:
    devices = GpuInventory.from_spec("2x80").devices
    assert place(devices, {0: 60 * GIB}, [16 * GIB]) == [0]
    assert place(devices, {0: 70 * GIB}, [16 * GIB]) == [1]
    assert place(devices, {0: 70 * GIB}, [16 * GIB, 16 * GIB]) is None
    assert place(devices, {0: 60 * GIB}, [16 * GIB, 70 * GIB]) == [0, 1]


def test_memory_other_processes_hold_is_not_free() -> None:
    busy = GpuDevice(0, "H100", 80 * GIB, 10 * GIB)  # 70 GiB held by a foreign process
    assert place([busy], {}, [16 * GIB]) is None
    assert shortfall([busy], [16 * GIB]) == "needs 16.0 GiB on one GPU; largest free is 10.0 GiB"


def test_shortfall_names_what_is_missing() -> None:
    one_24 = GpuInventory.from_spec("1x24").devices
    assert shortfall(one_24, [20 * GIB]) is None
    assert shortfall(one_24, [26 * GIB]) == "needs 26.0 GiB on one GPU; largest free is 24.0 GiB"
    assert shortfall(one_24, [14 * GIB, 18 * GIB]) == (
        "needs 2 GPU(s) (14.0 GiB, 18.0 GiB); 1 visible"
    )


def test_broker_never_oversubscribes_a_card(broker: GpuLeaseBroker) -> None:
    first = broker.lease([50 * GIB], timeout_s=1)
    second = broker.lease([50 * GIB], timeout_s=1)
    assert first.indices != second.indices  # 50 + 50 GiB does not fit one 80 GiB GPU
    small = broker.lease([30 * GIB], timeout_s=1)
    assert small.indices[0] in first.indices + second.indices  # best fit: fills a partial GPU
    pair = broker.lease([80 * GIB, 80 * GIB], timeout_s=1)
    assert set(pair.indices).isdisjoint(first.indices + second.indices)
    with pytest.raises(GpuLeaseTimeout, match=r"no room for 40.0 GiB.*GPU \d: 50.0 GiB by pid"):
        broker.lease([40 * GIB], timeout_s=0.2)  # 30 GiB left at most
    with pytest.raises(GpuUnavailable, match=r"needs 81.0 GiB on one GPU; largest free is 80.0"):
        broker.lease([81 * GIB], timeout_s=1)
    with pytest.raises(GpuUnavailable, match=r"needs 5 GPU\(s\)"):
        broker.lease([GIB] * 5, timeout_s=1)
    for lease in (first, second, small, pair):
        lease.release()
    assert broker.leases() == []


def test_acquire_waits_for_a_release(broker: GpuLeaseBroker) -> None:
    holder = broker.lease([60 * GIB] * 4, timeout_s=1)
    releasing = threading.Event()

    def release() -> None:
        releasing.set()
        holder.release()

    timer = threading.Timer(0.4, release)
    timer.start()
    with broker.lease([40 * GIB] * 2, timeout_s=10) as waited:
        assert releasing.is_set(), "granted while the holder still held every GPU"
        assert len(set(waited.indices)) == 2
        assert waited.env()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    timer.join()


def test_dead_owners_gpus_are_reclaimed(broker: GpuLeaseBroker) -> None:
    owner = subprocess.Popen(["sleep", "0.5"])
    try:
        broker.lease([80 * GIB] * 4, owner_pid=owner.pid, timeout_s=1, tag="dies-holding")
        assert {r.owner_pid for r in broker.leases()} == {owner.pid}
        with broker.lease([80 * GIB] * 4, timeout_s=10) as lease:
            assert sorted(lease.indices) == [0, 1, 2, 3]
            assert owner.poll() is not None, "granted while the owner still lived"
    finally:
        owner.kill()
        owner.wait()


class ScriptedMemory:
    """A GpuMemoryProbe whose readings follow a script: used bytes per call, last value repeats."""

    def __init__(self, readings: dict[int, list[int]]) -> None:
        self.readings = readings

    def used_bytes(self, index: int) -> int:
        script = self.readings[index]
        return script.pop(0) if len(script) > 1 else script[0]

    def holders(self, index: int) -> list[str]:
        return [f"pid 4242 (python -m dynamo.vllm) on GPU {index}"]


def test_wait_memory_returned_waits_then_passes() -> None:
    probe = ScriptedMemory({0: [30000 * MIB, 9000 * MIB, 600 * MIB], 1: [500 * MIB]})
    baseline = {0: 500 * MIB, 1: 500 * MIB}
    wait_memory_returned([0, 1], baseline, 256 * MIB, timeout_s=5, probe=probe)
    assert probe.readings[0] == [600 * MIB]


def test_wait_memory_returned_names_gpu_and_holders() -> None:
    probe = ScriptedMemory({0: [500 * MIB], 1: [20000 * MIB]})
    with pytest.raises(GpuMemoryNotReturned) as raised:
        wait_memory_returned([0, 1], {0: 500 * MIB, 1: 500 * MIB}, 256 * MIB, 0.3, probe)
    message = str(raised.value)
    assert "GPU 1: 20000 MiB used vs 756 MiB allowed" in message
    assert "pid 4242 (python -m dynamo.vllm)" in message
    assert "GPU 0" not in message


def test_a_neighbour_that_started_meanwhile_does_not_count_against_the_lease() -> None:
    """Our share came back; 18 GiB on the GPU belong to a topology leased after ours."""
    probe = ScriptedMemory({0: [18500 * MIB]})
    baseline = {0: 500 * MIB}
    with pytest.raises(GpuMemoryNotReturned):
        wait_memory_returned([0], baseline, 256 * MIB, 0.3, probe)
    neighbour = 18 * 1024 * MIB
    wait_memory_returned([0], baseline, 256 * MIB, 0.3, probe, allowance=lambda i: neighbour)


def test_longest_first_orders_by_known_duration_with_default_for_unknown() -> None:
    order = LongestFirst({"t::a": 60, "t::b": 600, "t::d": 300}, default_s=300)
    assert order.order(["t::a", "t::b", "t::c", "t::d"]) == ["t::b", "t::c", "t::d", "t::a"]


def test_nvml_inventory_when_a_driver_is_present() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        inventory = GpuInventory.from_nvml()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver: {exc}")
    assert inventory.devices or inventory.refused
    assert all(0 < d.free_bytes <= d.total_bytes for d in inventory.devices)
