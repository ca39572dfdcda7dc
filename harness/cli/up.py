"""`python -m harness up PROFILE`: launch one topology, print where it lives, keep it up until
Ctrl-C or SIGTERM, then tear it down and verify nothing is left (no process, no port)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from harness.cli.main import (
    DEFAULT_CASE,
    CliError,
    add_profiles_option,
    add_tier_option,
    case_named,
    profile_named,
)
from harness.core.settings import EdgeSettings
from harness.core.verdict import TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.machine.tier import detect_tier
from harness.topology.deployments import Launched
from harness.topology.processes import handling
from harness.topology.topology import Topology, launch

ORDER = 30  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness up agg_qwen3-vl-2b --tier cpu    # Ctrl-C tears it down"""

WATCH_S = 1.0
TEXT_WARMUP = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2}


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("up", help="launch a topology and keep it up until Ctrl-C")
    parser.add_argument("profile", help="profile name, e.g. agg_qwen3-vl-2b")
    add_tier_option(parser)
    parser.add_argument(
        "--case", help=f"case suffix whose launcher args to use ({DEFAULT_CASE}: no suffix)"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the text warm-up request before 'ready' (sent where the profile's cases send "
        "text alone)",
    )
    add_profiles_option(parser)
    return parser


def describe(topo: Topology[Launched]) -> str:
    plan = topo.plan
    lines = [
        f"ready in {topo.ready_s:.1f} s: {plan.profile} ({plan.tier}), model {plan.model}",
        f"frontend   {plan.frontend_url}   (chat: {plan.frontend_url}/v1/chat/completions, "
        f"model name {plan.served_model_name!r})",
    ]
    width = max(10, *(len(r.name) for r in plan.roles))
    for role in plan.roles:
        where = role.health_url or (
            f"{plan.frontend_url}/v1/models" if role.kind == "frontend" else "(no health port)"
        )
        lines.append(f"{role.name:<{width}} {where:<38} log {topo.role_log(role.name)}")
    lines += [
        f"launcher   {' '.join(plan.argv)}",
        f"           log {topo.deployment.roles.launcher_log}",
        f"ports      {' '.join(f'{k}={v}' for k, v in plan.ports.items())}",
        f"run dir    {plan.run_dir}",
        f"marker     HARNESS_TOPOLOGY_ID={plan.topology_id}",
        "Ctrl-C (or SIGTERM) tears it down.",
    ]
    return "\n".join(lines)


@contextmanager
def interrupt_on_term() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt once; later ones during teardown are ignored
    (so a second Ctrl-C cannot cut the verified teardown short)."""
    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if seen:
            print(f"signal {signum}: teardown already in progress", file=sys.stderr, flush=True)
            return
        seen.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    with handling(handler):
        yield


def serve_until_interrupted(topo: Topology[Launched]) -> None:
    print(describe(topo), flush=True)
    while True:
        time.sleep(WATCH_S)
        topo.watch()  # a role that dies ends `up` with its cause


def run(args: argparse.Namespace) -> int:
    profile = profile_named(args.profiles, args.profile)
    case = case_named(profile, args.case)
    tier = detect_tier(EdgeSettings.of(os.environ).tier_asked(args.tier))
    if profile.tier(tier) is None:
        raise CliError(f"{profile.source}: no {tier} tier: {profile.cpu_skip}")
    # a text warm-up only where the profile's cases send text alone: Dynamo's SGLang E/PD encode
    # worker refuses a request without media
    sends_text = any(not r.media for c in profile.cases for r in (c, *c.follow_ups))
    warmups = [TEXT_WARMUP] if sends_text and not args.no_warmup else []
    started = time.monotonic()
    with interrupt_on_term():
        topo = launch(LaunchSpec.of(profile, tier, case), warmups)
        print(f"launching {profile.name} ({tier}) logs in {topo.plan.log_dir}", flush=True)
        try:
            with topo:
                serve_until_interrupted(topo)
        except KeyboardInterrupt:
            report = topo.deployment.stop_report
            took = f"{report.duration_s:.1f} s" if report else "-"
            print(
                f"stopped after {time.monotonic() - started:.1f} s; teardown {took}, "
                "no process or port left",
                flush=True,
            )
            return 0
        except TopologyFailure as failure:
            print(failure.report(), file=sys.stderr, flush=True)
            return 1
    return 1
