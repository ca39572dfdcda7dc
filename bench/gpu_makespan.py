"""Makespan of a simulated GPU-tier suite on a 4x80 GiB runner: LongestFirst vs. file order.

Uses the broker's admission rule (`harness.machine.gpu_leases.place`) on a simulated clock.
Each of `--workers` xdist-like workers takes the next case in order and blocks until the broker
admits it; at every finish, waiting cases are re-polled in arrival order (any that fits starts).

Two admission modes, each against a lower bound that is valid for it:
- exclusive: every case reserves whole GPUs (engines at their default memory fraction);
  bound = max(longest case, total GPU-seconds / GPUs). Goal: LongestFirst <= 1.1x.
- VRAM-shared: cases reserve only their VRAM budget, so two may share a GPU and the GPU-seconds
  "bound" can be beaten; bound = max(longest case, total GiB-seconds / total GiB) instead.

    .venv/bin/python bench/gpu_makespan.py [--workers 4] [--noise 0.2] [--verbose]
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.cases.selection import CaseOrder, FileOrder, LongestFirst
from harness.machine.gpu_leases import place
from harness.machine.gpus import GIB, GpuInventory

GOAL_RATIO = 1.1


@dataclass(frozen=True)
class GpuCase:
    """One serve case: GPUs it needs (gpu_1/2/4 marker), VRAM per GPU, and how long it runs."""

    test_id: str
    gpus: int
    vram_gib: float
    duration_s: float


def _case(name: str, gpus: int, vram_gib: float, duration_s: float) -> GpuCase:
    return GpuCase(
        f"tests/serve/test_multimodal.py::test_serve[{name}]", gpus, vram_gib, duration_s
    )


# In file order, grouped by topology the way the serve suite's profiles are.
SUITE: tuple[GpuCase, ...] = (
    _case("vllm-agg-qwen2.5-vl-7b", 1, 40, 240),
    _case("vllm-agg-qwen2.5-vl-7b-video", 1, 44, 330),
    _case("vllm-agg-llava-1.5-7b", 1, 36, 180),
    _case("vllm-agg-phi-3.5-vision", 1, 24, 120),
    _case("vllm-agg-qwen2-audio-7b", 1, 38, 210),
    _case("vllm-ep-d-qwen2.5-vl-7b", 2, 40, 360),
    _case("vllm-epd-qwen2.5-vl-7b", 2, 44, 420),
    _case("vllm-epd-llava-1.5-7b", 2, 36, 300),
    _case("vllm-epd-qwen2.5-vl-32b", 4, 72, 600),
    _case("vllm-epd-llama-4-scout-fp8", 4, 76, 540),
    _case("vllm-disagg-qwen2.5-vl-7b-kv-router", 2, 40, 390),
    _case("vllm-agg-qwen2.5-vl-3b-smoke", 1, 18, 60),
    _case("vllm-agg-gemma-3-4b", 1, 22, 90),
    _case("sglang-agg-qwen2.5-vl-7b", 1, 42, 270),
    _case("sglang-epd-qwen2.5-vl-7b", 2, 44, 450),
    _case("sglang-disagg-qwen2.5-vl-7b", 2, 40, 480),
    _case("sglang-agg-llava-onevision-7b", 1, 40, 200),
    _case("sglang-epd-qwen2.5-vl-32b", 4, 74, 570),
    _case("trtllm-agg-llava-1.5-7b", 1, 34, 150),
    _case("vllm-agg-qwen2.5-vl-7b-lora", 1, 40, 300),
)


@dataclass(frozen=True)
class Schedule:
    makespan_s: float
    starts: dict[str, tuple[float, list[int]]]


def simulate(cases: Sequence[GpuCase], inventory: GpuInventory, workers: int) -> Schedule:
    """Event simulation of `workers` blocking workers sharing one broker."""
    queue = list(cases)
    waiting: list[GpuCase] = []
    running: list[tuple[float, int, GpuCase, list[int]]] = []
    reserved: dict[int, int] = {}
    starts: dict[str, tuple[float, list[int]]] = {}
    idle, now, seq = workers, 0.0, 0
    while queue or waiting or running:
        while idle and queue:
            waiting.append(queue.pop(0))
            idle -= 1
        for case in list(waiting):
            vram = int(case.vram_gib * GIB)
            indices = place(inventory.devices, reserved, [vram] * case.gpus)
            if indices is None:
                continue
            for index in indices:
                reserved[index] = reserved.get(index, 0) + vram
            waiting.remove(case)
            starts[case.test_id] = (now, indices)
            heapq.heappush(running, (now + case.duration_s, seq, case, indices))
            seq += 1
        if not running:
            raise RuntimeError(f"cases can never be admitted: {[c.test_id for c in waiting]}")
        now, _, done, indices = heapq.heappop(running)
        for index in indices:
            reserved[index] -= int(done.vram_gib * GIB)
        idle += 1
    return Schedule(now, starts)


def lower_bound_s(cases: Sequence[GpuCase], gpu_count: int) -> float:
    """max(longest case, total GPU-seconds / GPUs): no schedule with exclusive GPUs beats it."""
    gpu_seconds = sum(c.gpus * c.duration_s for c in cases)
    return max(max(c.duration_s for c in cases), gpu_seconds / gpu_count)


def ordered(cases: Sequence[GpuCase], order: CaseOrder) -> list[GpuCase]:
    by_id = {c.test_id: c for c in cases}
    return [by_id[t] for t in order.order([c.test_id for c in cases])]


def vram_bound_s(cases: Sequence[GpuCase], inventory: GpuInventory) -> float:
    """max(longest case, total GiB-seconds / total GiB): valid even when cases share GPUs."""
    total_gib = sum(d.total_bytes for d in inventory.devices) / GIB
    gib_seconds = sum(c.gpus * c.vram_gib * c.duration_s for c in cases)
    return max(max(c.duration_s for c in cases), gib_seconds / total_gib)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="4x80", help="simulated runner, COUNTxGIB")
    parser.add_argument("--workers", type=int, default=4, help="xdist workers (-n)")
    parser.add_argument("--noise", type=float, default=0.2, help="recorded-duration error (+/-)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--verbose", action="store_true", help="print each schedule")
    args = parser.parse_args(argv)

    inventory = GpuInventory.from_spec(args.gpus)
    gpu_count = len(inventory.devices)
    whole_gpu_gib = min(d.total_bytes for d in inventory.devices) / GIB
    rng = random.Random(args.seed)
    recorded = {c.test_id: c.duration_s for c in SUITE}
    noisy = {t: d * rng.uniform(1 - args.noise, 1 + args.noise) for t, d in recorded.items()}
    orders: dict[str, CaseOrder] = {
        "file order": FileOrder(),
        "LongestFirst": LongestFirst(recorded),
        f"LongestFirst (recorded +/-{args.noise:.0%})": LongestFirst(noisy),
    }
    gpu_bound = lower_bound_s(SUITE, gpu_count)
    modes = {
        "exclusive": ([replace(c, vram_gib=whole_gpu_gib) for c in SUITE], gpu_bound),
        "VRAM-shared": (list(SUITE), vram_bound_s(SUITE, inventory)),
    }
    gpu_seconds = sum(c.gpus * c.duration_s for c in SUITE)
    print(
        f"{len(SUITE)} cases on {args.gpus}, {args.workers} workers: {gpu_seconds:.0f} GPU-s, "
        f"longest {max(c.duration_s for c in SUITE):.0f} s, GPU-seconds bound {gpu_bound:.0f} s"
    )
    exclusive_ratio = 0.0
    for mode, (cases, bound) in modes.items():
        print(f"{mode}: lower bound {bound:.0f} s")
        for name, order in orders.items():
            schedule = simulate(ordered(cases, order), inventory, args.workers)
            ratio = schedule.makespan_s / bound
            if mode == "exclusive" and name == "LongestFirst":
                exclusive_ratio = ratio
            print(
                f"  {name:30s} makespan {schedule.makespan_s:6.0f} s  ratio {ratio:.3f}  "
                f"(vs GPU-seconds bound {schedule.makespan_s / gpu_bound:.3f})"
            )
            if args.verbose:
                by_start = sorted(schedule.starts.items(), key=lambda item: item[1])
                for test_id, (start, indices) in by_start:
                    print(f"      t={start:6.0f}  GPUs {indices}  {test_id}")
    met = exclusive_ratio <= GOAL_RATIO
    print(
        f"goal: exclusive LongestFirst <= {GOAL_RATIO}x bound: "
        f"{'met' if met else 'MISSED'} ({exclusive_ratio:.3f}x)"
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
