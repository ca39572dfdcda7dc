"""`python -m harness list`: profiles, tiers, each case's test id, marks, hardware and skips."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.cases.case import ServeCase
from harness.cases.selection import Shard, cadence_cases, plan_shards, recorded_durations
from harness.cli.main import (
    DEFAULT_CASE,
    CliError,
    add_profiles_option,
    add_tier_option,
    profiles_in,
    tier_chosen,
)
from harness.core.paths import REPO_ROOT
from harness.core.precision import family_dtype, precision_of
from harness.launch.mutation import CATALOGUE, Fault, load_catalogue
from harness.machine.memory_plan import GIB, model_facts, plan_memory
from harness.oracles.registry import case_checks, case_oracles
from harness.profiles import CaseSpec, Profile, Tier
from harness.profiles.checkout_case import as_the_checkout_defines_all
from harness.profiles.checkout_matrix import read_matrix
from harness.profiles.load import mark_names
from harness.profiles.schema import CADENCE_MARKS
from harness.profiles.upstream import (
    UPSTREAM_MARK,
    UPSTREAM_TAG,
    ParityRow,
    parity,
    render_markdown,
    serve_marks,
    upstream_ids,
    upstream_sources,
    upstream_tests,
)
from harness.profiles.upstream_checkout import UnreadableCheckout, read_checkout

ORDER = 20  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness list --tier cpu                 # every id, its marks and oracles, skips with why
  serve-harness list --upstream                 # parity with upstream's ids (the catalogue)
  serve-harness list --upstream --dynamo-src ~/dynamo   # parity with your checkout's own matrix
  serve-harness list --cadence pre_merge --tier cpu     # upstream's pre-merge gate on this tier"""

TIERS: tuple[Tier, ...] = ("gpu", "cpu")


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("list", help="list profiles, tiers and serve test ids")
    add_tier_option(parser, all_by_default=True)
    parser.add_argument("--json", action="store_true", help="one JSON object per case per line")
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="upstream Dynamo's multimodal test ids against ours, as markdown "
        "(docs/reference/upstream-parity.md); exit 1 on a mismatch",
    )
    parser.add_argument(
        "--dynamo-src",
        type=Path,
        metavar="PATH",
        help="with --upstream: read upstream's ids from this Dynamo checkout's "
        "tests/serve/multimodal_profiles/ instead of the catalogue (ids it lacks a reason for "
        "are findings)",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="what `pytest --shard K/N` runs of the --cadence cases (tier: --tier, default gpu), "
        "and its predicted time",
    )
    parser.add_argument(
        "--cadence",
        choices=CADENCE_MARKS,
        help="only the cases of this cadence, then upstream's ids of it: which the tier runs "
        "and why each other does not (the gate: pre_merge); with --shard, the cases it "
        "splits (default post_merge)",
    )
    parser.add_argument(
        "--durations-from",
        type=Path,
        default=REPO_ROOT / "runs" / "results.jsonl",
        help="with --shard: a results.jsonl whose durations balance the shards (%(default)s)",
    )
    add_profiles_option(parser)
    return parser


def hardware(profile: Profile, tier: Tier) -> str:
    """GPU: e.g. 'gpu_1 runner, 1 GPU(s) of >= 24 GiB: #0 20.2 GiB (encode 3.9 + prefill 8.1 +
    decode 8.1), Qwen/Qwen3-VL-2B-Instruct' (the memory plan, harness/machine/memory_plan.py)."""
    if tier == "gpu" and profile.gpu_skip:
        return f"GPU tier not planned: {profile.gpu_skip}"
    if tier == "gpu":
        plan = plan_memory(profile)
        gpus = "; ".join(
            f"#{device} {need / GIB:.1f} GiB ("
            + " + ".join(f"{r.role} {r.total / GIB:.1f}" for r in plan.roles if r.device == device)
            + ")"
            for device, need in enumerate(plan.per_device())
        )
        runner = mark_names(profile, tier, profile.cases[0])[-1]  # gpu_N / xpu_N
        facts = model_facts(profile.model.short_name)
        bound = facts.plans(profile.model.gpu)
        return (
            f"{runner} runner, {plan.devices} GPU(s) of >= {profile.gpu.card_gib:g} GiB: {gpus}, "
            f"{profile.model.gpu}"
            + (f" (planned at {facts.repo_id}'s bf16 weights, an upper bound)" if bound else "")
        )
    if profile.cpu is None:
        return "no CPU tier"
    precision = precision_of(family_dtype(profile.model.cpu))
    return (
        f"CPU, tiny {profile.model.cpu} model in {precision.dtype} "
        f"(the architecture of the GPU tier's {profile.model.gpu}; logprob tolerance "
        f"{precision.logprob_tolerance:g})"
    )


def render_precisions(profiles: list[Profile]) -> str:
    """Each precision the listed CPU profiles run in: its tolerance and where it comes from."""
    used = sorted({family_dtype(p.model.cpu) for p in profiles if p.cpu is not None})
    lines = ["CPU-tier precisions (harness/core/precision.py):"]
    for dtype in used:
        precision = precision_of(dtype)
        families = sorted(
            {p.model.cpu or "" for p in profiles if family_dtype(p.model.cpu) == dtype}
        )
        ties = "near-ties allowed, " if precision.near_ties else ""
        lines.append(
            f"  {dtype} ({', '.join(families)}): logprob tolerance "
            f"{precision.logprob_tolerance:g}, {ties}{precision.measured}"
        )
    return "\n".join(lines)


def skip_reason(profile: Profile, tier: Tier, sc: ServeCase) -> str | None:
    """Why the case never runs on this tier, whatever the machine (GPU count aside)."""
    return sc.skip_reason(None)


def patch_line(case: CaseSpec, tier: Tier) -> str | None:
    """What Dynamo a case with a `cpu_dynamo_patch` runs on (without --dynamo-src)."""
    patch = case.cpu_dynamo_patch
    if tier != "cpu" or patch is None:
        return None
    return f"the installed ai-dynamo with {patch.file} applied: {patch.why}"


def case_rows(profiles: list[Profile], tiers: tuple[Tier, ...]) -> list[dict[str, Any]]:
    rows = []
    upstream = upstream_ids()
    for profile in profiles:
        for tier in tiers:
            for case in profile.cases:
                sc = ServeCase(profile, case, tier)
                rows.append(
                    {
                        "test_id": sc.test_id,
                        "upstream": sc.test_id in upstream,
                        "profile": profile.name,
                        "case": case.suffix or DEFAULT_CASE,
                        "tier": tier,
                        "marks": serve_marks(profile, tier, case),
                        "hardware": hardware(profile, tier),
                        "launcher": profile.launcher,
                        "skip": skip_reason(profile, tier, sc),
                        "oracles": [o.describe() for o in case_oracles(case, tier, profile)],
                        "case_oracles": list(case_checks(case, tier, profile)),
                        "dynamo_patch": patch_line(case, tier),
                    }
                )
    return rows


def render_text(rows: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    header = None
    width = max((len(r["test_id"]) for r in rows), default=0)
    for row in rows:
        key = (row["profile"], row["tier"])
        if key != header:
            header = key
            lines.append(f"{row['profile']} [{row['tier']}] {row['hardware']} ({row['launcher']})")
        line = f"  {row['test_id']:<{width}}  {' '.join(row['marks'])}"
        line += f"  {UPSTREAM_TAG}" if row["upstream"] else ""
        if row["skip"]:
            line += f"\n  {'':<{width}}  skipped: {row['skip']}"
        else:
            for i, oracles in enumerate(row["oracles"]):
                label = "oracles" if i == 0 else f"then {i + 1}"
                line += f"\n  {'':<{width}}  {label}: {oracles}"
            if row["case_oracles"]:
                line += f"\n  {'':<{width}}  then together: {', '.join(row['case_oracles'])}"
            if row.get("dynamo_patch"):
                line += f"\n  {'':<{width}}  runs on: {row['dynamo_patch']}"
        lines.append(line)
    return "\n".join(lines)


def render_not_carried(rows: list[ParityRow]) -> str:
    """Upstream's multimodal ids no case here carries, each with why (the catalogue's reason,
    or that none is recorded)."""
    absent = [row for row in rows if row.upstream is not None and row.ours is None]
    lines = [f"upstream ids not carried here ({len(absent)}; docs/reference/upstream-parity.md):"]
    for row in absent:
        assert row.upstream is not None
        stack = row.upstream.stack.removeprefix("dynamo-")
        stack += "" if row.upstream.accelerator == "cuda" else f" {row.upstream.accelerator}"
        why = row.upstream.absent or row.problem or "no reason recorded"
        lines.append(f"  {row.id} [{stack}, {row.upstream.cadence}]: {why}")
    return "\n".join(lines)


def render_gate(rows: list[dict[str, Any]], cadence: str, tiers: tuple[Tier, ...]) -> str:
    """Upstream's ids of `cadence` on each tier: the ones a case here runs, then every other
    with why (skipped here on the tier, or not carried, with the catalogue's reason)."""
    lines = []
    for tier in tiers:
        ours = {r["test_id"]: r for r in rows if r["tier"] == tier}
        gate = [t for t in upstream_tests() if t.cadence == cadence]
        run, why = [], []
        for test in gate:
            # an id of another accelerator's file is carried only where it names our id for it
            here = test.here or (test.id if test.accelerator == "cuda" else "")
            row = ours.get(here)
            stack = test.stack.removeprefix("dynamo-")
            stack += "" if test.accelerator == "cuda" else f" {test.accelerator}"
            if row is not None and not row["skip"]:
                run.append(here)
            elif row is not None:
                why.append(f"  {test.id} [{stack}]: skipped on the {tier} tier: {row['skip']}")
            else:
                why.append(f"  {test.id} [{stack}]: {test.absent or 'no reason recorded'}")
        lines.append(
            f"upstream's {cadence} ids on the {tier} tier: {len(gate)}; run here {len(run)}, "
            f"not run {len(why)}"
        )
        lines += [f"  run: {test_id}" for test_id in run]
        lines += why
        lines.append(
            f'run them: scripts/serve-suite --tier {tier} -m "{cadence} and {UPSTREAM_MARK}"'
        )
    return "\n".join(lines)


def render_shard(args: argparse.Namespace) -> str:
    try:
        shard = Shard.parse(args.shard)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    tier: Tier = tier_chosen(args.tier) or "gpu"
    cadence = args.cadence or "post_merge"
    cases = cadence_cases(profiles_in(args.profiles), tier, cadence)
    plan = plan_shards(cases, shard.count, recorded_durations(args.durations_from))
    mine = plan.of(shard)
    lines = [
        f"shard {shard} ({tier}, {cadence}): {len(mine)} case(s), predicted "
        f"{plan.seconds[shard.index - 1]:.0f} s; all shards {plan.seconds}"
    ]
    return "\n".join([*lines, *(f"  {sc.test_id}" for sc in mine)])


def render_blind_faults(faults: list[Fault]) -> str:
    """The catalogue's faults the CPU tier cannot see (`mutate`), each with why."""
    blind = [f for f in faults if f.blind]
    lines = [f"Faults the CPU tier cannot see ({CATALOGUE.name}, `mutate`): {len(blind)}"]
    lines += [f"  {f.name}: {f.blind}" for f in blind]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.shard:
        print(render_shard(args))
        return 0
    if args.dynamo_src and not args.upstream:
        raise CliError("--dynamo-src goes with --upstream")
    if args.upstream:
        catalogue, sources, command = upstream_tests(), upstream_sources(), "list --upstream"
        profiles = profiles_in(args.profiles)
        undefinable: dict[tuple[str, str], str] = {}
        if args.dynamo_src:
            try:
                catalogue, where = read_checkout(args.dynamo_src, catalogue)
                entries = list(read_matrix(args.dynamo_src).entries)
            except (OSError, UnreadableCheckout) as exc:
                raise CliError(f"--dynamo-src: {exc}") from None
            # our cases as the checkout defines them: what the suite runs under --dynamo-src
            profiles, undefinable = as_the_checkout_defines_all(profiles, entries)
            sources = {"checkout": where}
            command += f" --dynamo-src {args.dynamo_src}"
        parity_rows = parity(profiles, catalogue, undefinable)
        print(render_markdown(parity_rows, sources, command), end="")
        return 1 if any(row.problem for row in parity_rows) else 0
    chosen = tier_chosen(args.tier)
    tiers = (chosen,) if chosen else TIERS
    profiles = profiles_in(args.profiles)
    rows = case_rows(profiles, tiers)
    if args.cadence:
        rows = [r for r in rows if args.cadence in r["marks"]]
    if args.json:
        print("\n".join(json.dumps(r) for r in rows))
    else:
        print(render_text(rows))
        if "cpu" in tiers:
            print(render_precisions(profiles))
            print(render_blind_faults(load_catalogue()))
        if args.cadence:
            print(render_gate(rows, args.cadence, tiers))
        else:
            print(render_not_carried(parity(profiles)))
    return 0
