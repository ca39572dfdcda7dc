"""Admission cannot oversubscribe a card: every GPU profile's memory plan leased by two concurrent
workers (as `pytest -n 2` would) on simulated runners, while a watcher reads the registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.cases.case import XPU_SKIP
from harness.core.paths import REPO_ROOT
from harness.machine.gpu_leases import shortfall
from harness.machine.gpus import GpuInventory
from harness.machine.memory_plan import plan_memory
from harness.profiles import load_profiles

PROFILES = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)

# One xdist-like worker: take_gpus for every GPU profile in its share, hold the lease a moment,
# release; print one JSON line per profile (admitted placement, or the skip reason).
WORKER = """
import json, sys, time
from harness.core.paths import REPO_ROOT
from harness.profiles import load_profiles
from harness.machine.gpus import GpuInventory
from harness.machine.gpu_leases import GpuUnavailable, shortfall
from harness.machine.gpu_leases import take_gpus
from harness.machine.memory_plan import plan_memory
from harness.cases.case import XPU_SKIP
worker, workers = int(sys.argv[1]), int(sys.argv[2])
inventory = GpuInventory.detect()
for rank, profile in enumerate(load_profiles(REPO_ROOT / "profiles", REPO_ROOT)):
    if rank % workers != worker:
        continue
    if profile.gpu_skip:
        print(json.dumps({"profile": profile.name, "skip": profile.gpu_skip}), flush=True)
        continue
    needs = plan_memory(profile).per_device()
    reason = XPU_SKIP if profile.accelerator == "xpu" else shortfall(inventory.devices, needs)
    if reason:
        print(json.dumps({"profile": profile.name, "skip": reason}), flush=True)
        continue
    slot = take_gpus(profile, f"w{worker}:{profile.name}")
    print(json.dumps({"profile": profile.name, "indices": slot.lease.indices,
                      "needs": slot.lease.needs}), flush=True)
    time.sleep(0.15)
    slot.release()
"""


def watch_registry(path: Path, stop: threading.Event, seen: list[dict[int, int]]) -> None:
    while not stop.is_set():
        try:
            records = json.loads(path.read_text() or "[]")
        except (FileNotFoundError, ValueError):  # not written yet, or mid-replace
            records = []
        per_gpu: dict[int, int] = {}
        for record in records:
            per_gpu[record["gpu_index"]] = per_gpu.get(record["gpu_index"], 0) + record["bytes"]
        seen.append(per_gpu)
        time.sleep(0.002)


@pytest.mark.parametrize("spec", ["1x24", "1x48", "4x24", "2x80", "1x80"])
def test_two_workers_never_oversubscribe_and_skips_name_the_shortfall(
    spec: str, tmp_path: Path
) -> None:
    registry = tmp_path / "gpus.json"
    env = {
        **os.environ,
        "HARNESS_GPUS": spec,
        "HARNESS_GPU_REGISTRY": str(registry),
        "PYTHONPATH": str(REPO_ROOT),
    }
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    inventory = GpuInventory.from_spec(spec)
    card = inventory.devices[0].total_bytes
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_registry, args=(registry, stop, seen))
    watcher.start()
    try:
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(i), "2"],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=REPO_ROOT,
            )
            for i in range(2)
        ]
        outputs = [w.communicate(timeout=120) for w in workers]
    finally:
        stop.set()
        watcher.join()
    assert all(w.returncode == 0 for w in workers), [err for _, err in outputs]
    results = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    assert {r["profile"] for r in results} == {p.name for p in PROFILES}
    for result in results:
        profile = next(p for p in PROFILES if p.name == result["profile"])
        if profile.gpu_skip:  # not planned: the profile says why
            assert result["skip"] == profile.gpu_skip
            continue
        needs = plan_memory(profile).per_device()
        if profile.accelerator == "xpu":  # an XPU runner's profile: never leased from NVML
            assert result["skip"] == XPU_SKIP
        elif "skip" in result:  # skipped exactly when the machine cannot hold the plan, saying why
            assert result["skip"] == shortfall(inventory.devices, needs)
            assert result["skip"].startswith("needs ")
        else:
            assert result["needs"] == needs
            assert len(set(result["indices"])) == len(needs)
            assert all(need <= card for need in needs)
    assert seen and all(total <= card for snapshot in seen for total in snapshot.values())
    admitted = sum("skip" not in r for r in results)
    peak = max(max(s.values(), default=0) for s in seen) / card
    print(
        f"\n{spec}: {admitted} admitted, {len(results) - admitted} skipped, "
        f"peak leased {peak:.0%} of a card"
    )
