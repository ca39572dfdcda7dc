"""How good is the serve suite: each fault of a catalogue (profiles/faults.yml) put into a copy of
a Dynamo checkout, the CPU-tier ids where the faulty code runs, and whether they caught it,
naming the cause and the role the catalogue says a catch must name.

Without --dynamo-src the copy is built from the installed ai-dynamo (the package the fault lies
in) and the harness's launchers; with it, from the checkout's working tree (committed or not).
The user's tree is never touched: every copy lives in a temporary directory, removed after its
run. First the unmutated copy runs every id once: an id that fails there judges no fault.

Verdicts: caught (an id failed naming an accepted cause and role), misnamed (an id failed naming
another), escaped (every id passed), not applicable (the fault's text is not in the file: the
catalogue is behind the code, never a pass), undetermined (an id fails unmutated), no result.
Exit status: 0 when every fault run was caught, 1 when one escaped or was misnamed, 2 on bad
input, 130 on Ctrl-C (the table so far is printed)."""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cli.affected import affected
from harness.cli.main import (
    DEFAULT_PROFILES,
    CliError,
    add_profiles_option,
    profiles_in,
)
from harness.cli.serve_runs import listed_ids, results_root, rows_by_id, run_side
from harness.core.paths import sglang_python
from harness.launch.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError
from harness.launch.mutation import (
    CATALOGUE,
    OUR_LAUNCHERS,
    CatalogueError,
    Fault,
    build_tree,
    load_catalogue,
)
from harness.profiles import Profile
from harness.report.results import FAILING_OUTCOMES

ORDER = 87  # after `bisect` (85) in `serve-harness --help`

EXAMPLES = """examples:
  serve-harness mutate --list
  serve-harness mutate                                  # every fault, on the installed Dynamo
  serve-harness mutate --faults vllm-e-pd-encoder-bypassed,vllm-usage-prompt-tokens-off-by-one
  serve-harness mutate --dynamo-src ~/dynamo --faults vllm-agg-worker-no-model-card"""

CAUGHT, MISNAMED, ESCAPED = "caught", "misnamed", "escaped"
NOT_APPLICABLE, UNDETERMINED, NO_RESULT = "not applicable", "undetermined", "no result"
MISSES = (ESCAPED, MISNAMED)
Rows = dict[str, dict[str, Any]]  # test id -> its results row


@dataclass
class Outcome:
    """One fault judged: the verdict, what the failing ids named, and its run."""

    fault: Fault
    verdict: str
    seen: str = ""
    ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    logs: str = ""


def judge(fault: Fault, rows: Rows, failing_unmutated: set[str]) -> tuple[str, str]:
    """The verdict on one fault's run and what its ids named."""
    seen = []
    for test_id in fault.ids:
        row = rows.get(test_id)
        if row is None:
            seen.append(f"{test_id}: no result")
        elif row["outcome"] in FAILING_OUTCOMES:
            cause, role = row.get("cause"), row.get("role")
            if fault.catch.accepts(cause, role):
                return CAUGHT, f"{test_id}: {cause} ({role or 'no role'})"
            seen.append(f"{test_id}: {cause} ({role or 'no role'})")
        else:
            seen.append(f"{test_id}: {row['outcome']}")
    said = "; ".join(seen)
    if any(i in failing_unmutated for i in fault.ids):
        return UNDETERMINED, f"fails unmutated: {said}"
    if any(rows.get(i, {}).get("outcome") in FAILING_OUTCOMES for i in fault.ids):
        return MISNAMED, said
    if all(rows.get(i, {}).get("outcome") == "passed" for i in fault.ids):
        return ESCAPED, said
    return NO_RESULT, said


def check_ids(faults: list[Fault], profiles: list[Profile]) -> None:
    """Each fault's ids are CPU ids that the change of its file affects (`affected`'s mapping)."""
    for fault in faults:
        ours = fault.file.startswith(OUR_LAUNCHERS)
        reach = affected([fault.file], profiles, tiers=("cpu",), checkout=not ours).ids("cpu")
        stray = [i for i in fault.ids if i not in reach]
        if stray:
            raise CliError(
                f"{CATALOGUE.name}: fault {fault.name}: ids {', '.join(stray)} do not run "
                f"{fault.file} on the CPU tier (it affects: {', '.join(reach) or 'none'})"
            )


def chosen_faults(args: argparse.Namespace, catalogue: list[Fault]) -> list[Fault]:
    if not args.faults:
        return catalogue
    by_name = {f.name: f for f in catalogue}
    unknown = [n for n in args.faults if n not in by_name]
    if unknown:
        raise CliError(f"--faults: no fault {', '.join(unknown)} in {CATALOGUE.name} (--list)")
    return [by_name[n] for n in args.faults]


def site_of(fault: Fault | None) -> Path:
    """The site-packages the stack's roles import Dynamo from, where a built tree copies it."""
    if fault is not None and fault.stack == "sglang":
        python = sglang_python()
        lib = next(python.parent.parent.glob("lib/python3*/site-packages"), None)
        if lib is None:
            raise CliError(f"no SGLang venv at {python} (scripts/bootstrap.sh builds it)")
        return lib
    return Path(sysconfig.get_paths()["purelib"])


class Runner:
    """Runs the serve suite on one copy: built, the ids run, the copy removed."""

    def __init__(
        self, root: Path, profiles: list[Profile], checkout: Path | None, extra: list[str]
    ) -> None:
        self.root, self.profiles, self.checkout, self.extra = root, profiles, checkout, extra

    def __call__(self, fault: Fault | None, ids: list[str]) -> tuple[Rows, str | None, float, Path]:
        """(rows of `ids`, why the fault did not apply, wall seconds, results dir)."""
        out = self.root / (fault.name if fault else "unmutated")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="harness-mutate-") as tmp:
            tree, not_applied = build_tree(
                fault, Path(tmp), self.profiles, site_of(fault), self.checkout
            )
            if not_applied:
                return {}, not_applied, time.monotonic() - started, out
            env = {**os.environ, DYNAMO_SRC_ENV: str(tree)}
            label = fault.name if fault else "unmutated"
            run_side(label, ids, out, self.extra, env, strict=False, tool="mutate")
        rows = rows_by_id(out / "results.jsonl", ids, label)
        return rows, None, time.monotonic() - started, out


def mutate(faults: list[Fault], run: Runner, baseline: bool, outcomes: list[Outcome]) -> None:
    """Judge every fault, appending to `outcomes` as each ends (an interrupt keeps those)."""
    failing: set[str] = set()
    if baseline:
        ids = sorted({i for f in faults for i in f.ids})
        say(f"serve-harness mutate: the unmutated tree, {len(ids)} id(s)")
        rows, _, wall, _ = run(None, ids)
        failing = {i for i in ids if rows.get(i, {}).get("outcome") != "passed"}
        say(
            f"serve-harness mutate: unmutated in {wall:.0f} s; failing there: "
            f"{', '.join(sorted(failing)) or 'none'}"
        )
    for number, fault in enumerate(faults, 1):
        say(f"serve-harness mutate: {number}/{len(faults)} {fault.name} ({fault.file})")
        rows, not_applied, wall, out = run(fault, fault.ids)
        if not_applied:
            outcome = Outcome(fault, NOT_APPLICABLE, not_applied, [], wall)
        else:
            verdict, seen = judge(fault, rows, failing)
            outcome = Outcome(fault, verdict, seen, list(fault.ids), wall, str(out))
        outcomes.append(outcome)
        say(f"serve-harness mutate: {fault.name}: {outcome.verdict} ({outcome.seen})")


def render(outcomes: list[Outcome], where: str, total_s: float, interrupted: bool) -> str:
    counts = {
        v: sum(o.verdict == v for o in outcomes) for v in dict.fromkeys(o.verdict for o in outcomes)
    }
    summary = ", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing run"
    head = [
        f"### Mutation: {len(outcomes)} fault(s) on {where} ({total_s:.0f} s): {summary}",
        "",
    ]
    if interrupted:
        head += ["**Interrupted**: the faults judged before it follow.", ""]
    table = [
        "| fault | class | file | ids run | verdict | named | a catch names | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        f = o.fault
        table.append(
            f"| {f.name} | {f.fault_class} | `{f.file}` | {', '.join(o.ids) or '-'} | "
            f"**{o.verdict}** | {o.seen or '-'} | {f.catch} | {o.wall_s:.0f} s |"
        )
    return "\n".join(head + table)


def render_catalogue(faults: list[Fault]) -> str:
    lines = [f"{len(faults)} faults in {CATALOGUE.relative_to(CATALOGUE.parents[1])}:"]
    for f in faults:
        lines.append(f"  {f.name:<44} {f.fault_class:<14} {f.stack:<7} {f.file}")
        lines.append(f"  {'':<44} ids: {', '.join(f.ids)}; a catch names {f.catch}")
        if f.blind:
            lines.append(f"  {'':<44} not seen on the CPU tier: {f.blind}")
    return "\n".join(lines)


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "mutate",
        help="how good is the serve suite: faults put into a copy of Dynamo, caught or escaped",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dynamo-src",
        type=Path,
        metavar="PATH",
        help="a Dynamo checkout to put the faults into (default: the installed ai-dynamo and "
        "the harness's launchers)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--faults", type=listed_ids, metavar="NAME,…", help="these faults only")
    which.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument(
        "--ids", type=listed_ids, metavar="ID,…", help="run these ids for every fault"
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (an id failing there is then taken as a catch)",
    )
    parser.add_argument(
        "--results-dir", type=Path, help="each run's results and the table (default: runs/)"
    )
    parser.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARG", help="after --: passed to pytest"
    )
    add_profiles_option(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        catalogue = load_catalogue()
    except CatalogueError as exc:
        raise CliError(str(exc)) from None
    if args.list:
        print(render_catalogue(catalogue))
        return 0
    profiles = profiles_in(args.profiles)
    faults = chosen_faults(args, catalogue)
    if args.ids:
        faults = [f.model_copy(update={"ids": args.ids}) for f in faults]
    else:
        check_ids(faults, profiles)
    checkout = args.dynamo_src.resolve() if args.dynamo_src else None
    if checkout is not None:
        try:
            DynamoSource(checkout).with_runtime()
        except DynamoSourceError as exc:
            raise CliError(str(exc)) from None
    where = f"{checkout}" if checkout else "the installed ai-dynamo and the harness's launchers"
    root = results_root(args, "mutate")
    extra = [] if args.profiles == DEFAULT_PROFILES else ["--profiles", str(args.profiles)]
    runner = Runner(root, profiles, checkout, [*extra, *args.pytest_args])
    outcomes: list[Outcome] = []
    started = time.monotonic()
    interrupted = False
    try:
        mutate(faults, runner, not args.no_baseline, outcomes)
    except KeyboardInterrupt:
        interrupted = True
        say("serve-harness mutate: interrupted; the faults judged so far follow")
    except CatalogueError as exc:
        raise CliError(str(exc)) from None
    finally:
        text = render(outcomes, where, time.monotonic() - started, interrupted)
        root.mkdir(parents=True, exist_ok=True)
        (root / "mutation.md").write_text(text + "\n")
        print(text)
        say(f"serve-harness mutate: table and every run's results in {root}")
    if interrupted:
        return 130
    return 1 if any(o.verdict in MISSES for o in outcomes) else 0


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
