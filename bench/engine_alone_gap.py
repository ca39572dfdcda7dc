"""The engine alone's tolerance on a tier, measured: for each profile, its topology is launched
(the real launcher, on this machine's tier), the profile's requests are answered with top-5
log-probabilities, the topology stops, and then the same engine runs alone
(harness/oracles/engine_alone.py) on the same GPU or CPU, with the engine flags the answering
role recorded, on the same requests. Prints, per profile and request, the largest |served -
engine alone| log-probability and whether the tokens agree, and per stack and precision the
largest gap with 10x its margin: the figure `ENGINE_TOLERANCE` (harness/oracles/engine_answer.py)
takes, as the CPU tier's was taken.

On a GPU runner this is the command that measures the GPU tier's tolerance (the oracle does not
run on the GPU tier until it has one: docs/explanation/tiers.md). On the CPU tier it reproduces
the suite's own figures (the serve suite's `max_engine_gap`), which is how it is checked here.

Usage: python bench/engine_alone_gap.py --tier gpu [--profiles agg_qwen3-vl-2b agg_llava-1.5-7b]
       python bench/engine_alone_gap.py --tier cpu --profiles agg_qwen3-vl-2b"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.paths import REPO_ROOT
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.checks import compare_logprobs, engine_steps
from harness.oracles.engine_alone import EngineAlone, EngineLaunch
from harness.oracles.engine_answer import as_float32
from harness.oracles.model_answer import special_tokens
from harness.oracles.model_reference import TOP_LOGPROBS
from harness.payloads.chat import MediaURLs, request_body, warmup_bodies
from harness.payloads.media import AssetServer, build_media
from harness.profiles import Profile, Tier, load_profiles
from harness.topology.topology import launch

DEFAULT_PROFILES = ("agg_qwen3-vl-2b", "agg_llava-1.5-7b")
MARGIN = 10  # as every tolerance here is set: 10x the largest gap seen


def served(profile: Profile, tier: Tier, urls: MediaURLs) -> tuple[EngineLaunch, list[Any]]:
    """The profile's first case on its own launch: each request's body and answer."""
    case = profile.cases[0]
    requests = [
        r for r in (case, *case.follow_ups) if (r.gpu if tier == "gpu" else r.cpu).status == 200
    ]
    kinds = sorted({kind for r in requests for kind in r.media})
    bodies = [request_body(r, urls, TOP_LOGPROBS) for r in requests]
    topo = launch(LaunchSpec.of(profile, tier, case), warmup_bodies(kinds, urls, text=False))
    with topo:
        answers = [topo.post_chat(body).json() for body in bodies]
        roles = [r.name for r in profile.worker_roles if r.discovery_component != "encode"]
        engine = EngineLaunch.of_roles(topo.plan.log_dir, roles, profile.stack)
    if engine is None:
        raise SystemExit(f"{profile.name}: no answering role recorded its engine's launch")
    return engine, list(zip(bodies, answers, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=["cpu", "gpu"], required=True)
    parser.add_argument("--profiles", nargs="+", default=list(DEFAULT_PROFILES))
    args = parser.parse_args()
    profiles = {p.name: p for p in load_profiles(REPO_ROOT / "profiles", REPO_ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        media = build_media(Path(tmp) / "media")
        with AssetServer(media.green_square_png.parent) as server:
            urls = MediaURLs.serve(server, media)
            engines = EngineAlone(root=Path(tmp) / "engine-alone")  # computed now, not cached
            try:
                worst = measure([profiles[n] for n in args.profiles], args.tier, urls, engines)
            finally:
                engines.close()
    column = "served model" if args.tier == "gpu" else "precision"
    print(f"\nstack | {column} | largest gap | tolerance (x10)")
    for (stack, dtype), gap in sorted(worst.items()):
        print(f"{stack} | {dtype} | {gap:.3g} | {gap * MARGIN:.3g}")
    return 0


def measure(
    profiles: list[Profile], tier: Tier, urls: MediaURLs, engines: EngineAlone
) -> dict[tuple[str, str], float]:
    """Each profile served, then its engine alone: the largest gap per stack and precision."""
    worst: dict[tuple[str, str], float] = {}
    print("profile | request | tokens agree | largest gap")
    for profile in profiles:
        engine, answered = served(profile, tier, urls)
        dtype = next((u[1] for u in engine.args if u[0] == "--dtype"), "auto")
        for i, (body, answer) in enumerate(answered):
            alone = engines.answer(engine, body, urls.fetch, TOP_LOGPROBS)
            steps = engine_steps(answer, special_tokens(engine.model)) or []
            verdict = compare_logprobs(as_float32(steps), as_float32(alone.steps), float("inf"))
            agree = [s.token for s in steps] == [s.token for s in alone.steps]
            gap = verdict.gap or 0.0
            # the GPU tier's tolerances are keyed by the served model (GPU_ENGINE_TOLERANCE)
            key = (profile.stack, profile.model.gpu if tier == "gpu" else dtype)
            worst[key] = max(worst.get(key, 0.0), gap)
            print(f"{profile.name} | {i} | {agree} | {gap:.3g}")
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
