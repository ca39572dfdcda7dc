"""Teardown speed on real CPU topologies: test end -> no process, no listening port.

Compares the harness's teardown (SIGTERM, short grace, SIGKILL the groups, marker sweep; each
role leaving at once when its own exit is done: the role site's quick exit) against baselines
measured in the same run: the anchors' way (Dynamo's default 5 s worker grace, SIGTERM, wait up
to 8 s, then SIGKILL) and the harness without the quick exit (each role finalising its
interpreter, as before 2026-12-06). Also reports anything new left in /dev/shm.
Usage: python bench/teardown_speed.py [--repeats 3] [--profiles agg_qwen3-vl-2b ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness

from harness.core.paths import REPO_ROOT
from harness.core.role_contract import STOPPING_FILE
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import Profile, load_profiles
from harness.topology import deployments
from harness.topology.topology import STOP_GRACE_S, launch

BASELINE = {
    "name": "anchor (5 s worker grace, 8 s wait)",
    "grace": 8.0,
    "dyn_grace": "5",
    "finalise": True,
}
HARNESS = {
    "name": f"harness ({STOP_GRACE_S:g} s wait, worker grace 0)",
    "grace": STOP_GRACE_S,
    "dyn_grace": "0",
}
SHORT = {"name": "harness, 2 s wait then SIGKILL", "grace": 2.0, "dyn_grace": "0"}
FINALISING = {
    "name": "harness, roles finalise their interpreters",
    "grace": STOP_GRACE_S,
    "dyn_grace": "0",
    "finalise": True,
}


def shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def one(profile: Profile, mode: dict[str, Any]) -> tuple[float, set[str]]:
    before = shm()
    env = {**os.environ, "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": mode["dyn_grace"]}
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]), base_env=env)
    # the stopping file made uncreatable: the roles never see it and finalise as before
    stopping = "absent/" + STOPPING_FILE if mode.get("finalise") else STOPPING_FILE
    with topo, mock.patch.object(deployments, "STOPPING_FILE", stopping):
        report = topo.stop(grace_s=mode["grace"])
    assert report is not None
    leaked = shm() - before
    for name in leaked:  # reported, then removed: the bench must not leave what it measures
        Path("/dev/shm", name).unlink(missing_ok=True)
    return report.duration_s, leaked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    default = ["agg_qwen3-vl-2b", "e_pd_qwen3-vl-2b", "epd_qwen3-vl-2b", "sglang_e_pd_qwen3-vl-2b"]
    parser.add_argument("--profiles", nargs="+", default=default)
    args = parser.parse_args()
    profiles = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}
    print(f"{'profile':22} {'mode':42} {'median s':>9} {'max s':>7}  shm leftovers")
    for name in args.profiles:
        medians = {}
        for mode in (BASELINE, FINALISING, HARNESS, SHORT):
            runs = [one(profiles[name], mode) for _ in range(args.repeats)]
            times = [t for t, _ in runs]
            left = set().union(*(s for _, s in runs))
            medians[mode["name"]] = statistics.median(times)
            print(
                f"{name:22} {mode['name']:42} {medians[mode['name']]:9.2f} {max(times):7.2f}"
                f"  {sorted(left) or '-'}"
            )
        for mode in (FINALISING, HARNESS, SHORT):
            ratio = medians[mode["name"]] / medians[BASELINE["name"]]
            print(f"{name:22} {'ratio to anchor: ' + str(mode['name']):42} {ratio:9.2f}")
    print(f"(from {Path(__file__).name}; goal: harness median <= 1.5 s, issue 63)")


if __name__ == "__main__":
    main()
