"""SGLang's CPU-tier launches against vLLM's, side by side in one run, on the same tiny checkpoint.

For each topology both stacks run (agg, agg router, E/PD, P/D, E/P/D): time to ready, the first
image request after ready (the warm-up), the mean of --requests image requests of 50 tokens
(after the warm-up), idle CPU over --idle-s seconds, and peak RSS. SGLang runs as the harness
runs it (`--sleep-on-idle`) and, for the --stock topologies, as SGLang runs by default (its idle
schedulers poll without sleeping: the baseline, HARNESS_SGLANG_SLEEP_ON_IDLE=0). Ratios are
SGLang over vLLM per request.
Usage: python bench/sglang_pace.py [--topologies agg agg_router ...] [--stock agg_router]
Run it alone: every launch shares the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: harness

from harness.core.paths import REPO_ROOT, cache_dir
from harness.launch.launch_spec import LaunchSpec
from harness.payloads.chat import MediaURLs, chat_body
from harness.payloads.media import AssetServer, build_media
from harness.profiles import Profile, load_profiles
from harness.topology.topology import launch
from harness.topology.tree_usage import tree_cpu_s, tree_rss_mib

PAIRS = {  # topology -> (vLLM profile, SGLang profile), both on the tiny Qwen3-VL
    "agg": ("agg_qwen3-vl-2b", "sglang_agg_qwen3-vl-2b"),
    "agg_router": ("agg_router_qwen3-vl-2b", "sglang_agg_router_qwen3-vl-2b"),
    "e_pd": ("e_pd_qwen3-vl-2b", "sglang_e_pd_qwen3-vl-2b"),
    "p_d": ("p_d_qwen3-vl-2b", "sglang_pd_qwen3-vl-2b"),
    "epd": ("epd_qwen3-vl-2b", "sglang_epd_qwen3-vl-2b"),
}
PROMPT = "Describe this image in detail."
TOKENS = 50  # the SGLang router case's answers in the measurement: about 50 tokens


def measure(
    profile: Profile, urls: MediaURLs, requests: int, idle_s: float, env: dict[str, str]
) -> dict[str, Any]:
    body = {**chat_body(PROMPT, ["image_url"], TOKENS, urls), "ignore_eos": True}
    with launch(LaunchSpec.of(profile, "cpu", profile.cases[0]), base_env=env) as topo:
        launcher = topo.deployment.roles.launcher
        assert launcher is not None and topo.ready_s is not None
        cpu0, t0 = tree_cpu_s(launcher), time.monotonic()
        time.sleep(idle_s)
        idle_pct = 100 * (tree_cpu_s(launcher) - cpu0) / (time.monotonic() - t0)
        times = []
        for _ in range(requests + 1):
            started = time.monotonic()
            answer = topo.post_chat(body)
            answer.raise_for_status()
            times.append(time.monotonic() - started)
        return {
            "ready_s": topo.ready_s,
            "warmup_s": times[0],
            "request_s": statistics.mean(times[1:]),
            "idle_cpu_pct": idle_pct,
            "peak_rss_gib": max(topo.peak_rss_mib, tree_rss_mib(launcher)) / 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--stock", nargs="*", default=["agg_router"], choices=list(PAIRS))
    args = parser.parse_args()
    profiles = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}
    media = build_media(cache_dir() / "media")
    header = (
        f"{'topology':11} {'run':28} {'ready s':>8} {'warm-up s':>10} {'request s':>10} "
        f"{'idle CPU %':>11} {'peak RSS GiB':>13} {'x vLLM':>7}"
    )
    print(header)
    with AssetServer(media.green_square_png.parent) as server:
        urls = MediaURLs.serve(server, media)
        for topology in args.topologies:
            vllm, sglang = PAIRS[topology]
            runs: list[tuple[str, str, dict[str, str]]] = [
                ("vLLM", vllm, {}),
                ("SGLang (harness: sleep on idle)", sglang, {}),
            ]
            if topology in args.stock:
                stock = {"HARNESS_SGLANG_SLEEP_ON_IDLE": "0"}
                runs.append(("SGLang (stock: busy idle)", sglang, stock))
            base = None
            for label, name, extra in runs:
                m = measure(
                    profiles[name], urls, args.requests, args.idle_s, {**os.environ, **extra}
                )
                base = base or m["request_s"]
                print(
                    f"{topology:11} {label:28} {m['ready_s']:8.1f} {m['warmup_s']:10.2f} "
                    f"{m['request_s']:10.2f} {m['idle_cpu_pct']:11.0f} {m['peak_rss_gib']:13.2f} "
                    f"{m['request_s'] / base:7.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
