"""Time to ready, peak RSS and idle CPU of each CPU-tier topology (one launch each).

Idle CPU is measured over --idle-s seconds after ready with no traffic; the baseline in the same
run is the same topology with NIXL's stock busy-spinning progress thread
(HARNESS_NIXL_PTHR_DELAY_US=0), which the harness's shim otherwise slows to a 1 ms sleep.
Usage: python bench/footprint.py [--profiles epd_qwen3-vl-2b ...] [--idle-s 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness

from harness.core.paths import REPO_ROOT
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import Profile, load_profiles
from harness.topology.topology import launch
from harness.topology.tree_usage import tree_cpu_s, tree_rss_mib


def measure(profile: Profile, idle_s: float, nixl_delay_us: str) -> dict[str, float]:
    env = {**os.environ, "HARNESS_NIXL_PTHR_DELAY_US": nixl_delay_us}
    with launch(LaunchSpec.of(profile, "cpu", profile.cases[0]), base_env=env) as topo:
        launcher = topo.deployment.roles.launcher
        assert launcher is not None and topo.ready_s is not None
        cpu0, t0 = tree_cpu_s(launcher), time.monotonic()
        peak = topo.peak_rss_mib
        while time.monotonic() - t0 < idle_s:
            time.sleep(0.5)
            peak = max(peak, tree_rss_mib(launcher))
        idle_pct = 100 * (tree_cpu_s(launcher) - cpu0) / (time.monotonic() - t0)
        return {"ready_s": topo.ready_s, "peak_rss_gib": peak / 1024, "idle_cpu_pct": idle_pct}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ["agg_qwen3-vl-2b", "e_pd_qwen3-vl-2b", "epd_qwen3-vl-2b"]
    parser.add_argument("--profiles", nargs="+", default=default)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--no-baseline", action="store_true", help="skip the busy-spin baseline")
    args = parser.parse_args()
    profiles = {p.name: p for p in load_profiles(REPO_ROOT / "profiles" / "vllm", REPO_ROOT)}
    print(f"{'profile':18} {'mode':22} {'ready s':>8} {'peak RSS GiB':>13} {'idle CPU %':>11}")
    for name in args.profiles:
        modes = [("harness (1 ms delay)", "1000")]
        if not args.no_baseline:
            modes.append(("stock NIXL (spin)", "0"))
        rows = {}
        for label, delay in modes:
            rows[label] = m = measure(profiles[name], args.idle_s, delay)
            print(
                f"{name:18} {label:22} {m['ready_s']:8.1f} {m['peak_rss_gib']:13.2f} "
                f"{m['idle_cpu_pct']:11.1f}"
            )
        if len(rows) == 2:
            a, b = rows["harness (1 ms delay)"], rows["stock NIXL (spin)"]
            ratio = a["idle_cpu_pct"] / b["idle_cpu_pct"] if b["idle_cpu_pct"] else float("nan")
            print(f"{name:18} {'idle CPU ratio':22} {ratio:>35.2f}")


if __name__ == "__main__":
    main()
