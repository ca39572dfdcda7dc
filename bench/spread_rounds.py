"""How often a router's spread shows, by how the spread oracle's requests are sent, in one run.

One launch of a router profile (CPU tier); each round sends the spread oracle's declared requests
(`Spread.sends_while_busy`) and reads each replica's request counter before and after:
- `held`: as the case loop sends them (`declared_while_busy`: the three beside a held request,
  held again where the hold ended first);
- `alone`: the same three one after another, no hold (the baseline);
- `at_once`: the same three plus the hold's prompt as a short request, all sent at once (a check
  that rests on the frontend receiving them together).
A round spread where every replica's counter moved. Prints each round, then per method the
rounds that spread, the holds used, and the mean round time against the baseline's.
Usage: python bench/spread_rounds.py [--profile PATH] [--rounds N]   (one launch, ~2 min)
Run it alone: the launch and the rounds share the machine's cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness

from harness.cases.loop import declared_while_busy
from harness.core.paths import REPO_ROOT
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.answer import CaseScope
from harness.oracles.case_oracles import Spread
from harness.profiles import load_profile
from harness.topology.topology import Topology, launch

DEFAULT_PROFILE = "profiles/sglang/agg_router_qwen3-vl-2b.yaml"


def held(topo: Topology[Any], scope: CaseScope) -> None:
    declared_while_busy(scope, topo)


def alone(topo: Topology[Any], scope: CaseScope) -> None:
    for body in Spread().sends_while_busy(scope).rest:
        topo.post_chat(body, check_roles=False)


def at_once(topo: Topology[Any], scope: CaseScope) -> None:
    sends = Spread().sends_while_busy(scope)
    short_hold = {**sends.hold, "max_tokens": 32, "ignore_eos": False}
    bodies = [short_hold, *sends.rest]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        list(pool.map(lambda body: topo.post_chat(body, check_roles=False), bodies))


METHODS: dict[str, Callable[[Topology[Any], CaseScope], None]] = {
    "alone": alone,
    "at_once": at_once,
    "held": held,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    profile = load_profile(REPO_ROOT / args.profile, REPO_ROOT)
    case = profile.cases[0]
    scope = CaseScope(case, "cpu", profile)
    per_request = 1 + len(Spread().sends_while_busy(scope).rest)  # a held round's requests
    spread: dict[str, int] = dict.fromkeys(METHODS, 0)
    seconds: dict[str, list[float]] = {name: [] for name in METHODS}
    holds = 0
    with launch(LaunchSpec.of(profile, "cpu", case)) as topo:
        for n in range(args.rounds):
            for name, send in METHODS.items():
                before = topo.request_counts()
                start = time.monotonic()
                send(topo, scope)
                seconds[name].append(time.monotonic() - start)
                after = topo.request_counts()
                moved = {r: (after.get(r) or 0) - (before.get(r) or 0) for r in profile.replicas}
                spread[name] += all(count >= 1 for count in moved.values())
                if name == "held":
                    holds += round(sum(moved.values()) / per_request)
                counts = ", ".join(f"{r} +{c:g}" for r, c in moved.items())
                print(f"round {n + 1:2d} {name:8s} {counts}  {seconds[name][-1]:.2f} s", flush=True)
    base_s = statistics.mean(seconds["alone"])
    print(f"\n{profile.name}, {args.rounds} rounds each")
    for name in METHODS:
        mean = statistics.mean(seconds[name])
        note = f", {holds} holds" if name == "held" else ""
        cost = "(baseline)" if name == "alone" else f"{mean / base_s:.1f}x the baseline's time"
        rounds = f"{spread[name]:2d}/{args.rounds}"
        print(f"{name:8s} spread {rounds}{note}, {mean:.2f} s a round {cost}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
