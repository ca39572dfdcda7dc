"""Changed files -> the serve test ids they affect, with cadence marks, and the launchers that no
pre_merge test covers. Callers pass paths (repo-relative, POSIX) and profiles; the launchers'
texts are read from launchers/ unless given.

Rules (first match wins):
- `harness/`, `tests/serve/`, `conftest.py`, `pytest.ini`, `pyproject.toml`, `requirements/`,
  `scripts/bootstrap.sh`, `scripts/apply_shims.py` -> every case (they shape every run);
- a profile YAML -> its cases;
- a launcher script -> the cases of every profile whose `launcher` it is;
- any other file under `launchers/` (e.g. `launchers/lib/common.sh`) -> the cases of every
  profile whose launcher uses it: `source`s it, or names it by a path relative to itself
  (`"$(dirname "${BASH_SOURCE[0]}")/zmq_broker.py"`), directly or through another used file;
- `launchers/lib/dynamo_src_launcher.sh` (runs a checkout's launcher) -> the cases of every
  profile that names an `upstream_launcher`;
- anything else (docs, bench, the harness's own tests) -> nothing.

A Dynamo checkout's files (`checkout=True`) map otherwise: its launcher -> the profiles naming it
as their `upstream_launcher` (its `examples/common/` helpers -> all of those); its Python under
`components/src/dynamo/<package>` -> the profiles of that engine (`vllm`, `sglang`, `trtllm`),
or every profile for a shared package (`frontend`, `common`, …).

`affected()` is the one place these rules are applied: this subcommand prints its report, and
`validate checkout` and `validate image` run `affected(...).ids(tier)`, so for the same changed
files they run the ids `affected --tier TIER` lists with a cadence on that tier.

`python -m harness affected [--base REF | FILE…]`: the serve test ids a change affects, with
their cadence marks; warns when a changed launcher has no pre_merge coverage."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.cli.main import (
    CliError,
    add_profiles_option,
    add_tier_option,
    profiles_in,
    tier_chosen,
)
from harness.core.paths import REPO_ROOT
from harness.profiles import Profile, Tier
from harness.profiles.launchers import files_used_by
from harness.profiles.load import cadence_marks
from harness.profiles.upstream import UPSTREAM_TAG, upstream_ids

ORDER = 50  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness affected --base origin/main            # this repo's change -> ids
  serve-harness affected launchers/vllm/disagg_multimodal_epd.sh --tier cpu
  serve-harness affected --dynamo-src ~/dynamo --base origin/main   # your Dynamo branch's change"""

EVERYTHING_PREFIXES = ("harness/", "tests/serve/", "requirements/")
EVERYTHING_FILES = (
    "conftest.py",
    "pytest.ini",
    "pyproject.toml",
    "scripts/bootstrap.sh",
    "scripts/apply_shims.py",
)
LAUNCHERS = "launchers/"
CHECKOUT_RUNNER = "launchers/lib/dynamo_src_launcher.sh"
CHECKOUT_PYTHON = "components/src/dynamo/"
CHECKOUT_HELPERS = "examples/common/"
ENGINE_PACKAGES = ("vllm", "sglang", "trtllm")
TIERS: tuple[Tier, ...] = ("gpu", "cpu")
PRE_MERGE = "pre_merge"


@dataclass(frozen=True)
class AffectedCase:
    test_id: str
    profile: str
    cadence: Mapping[Tier, tuple[str, ...]]  # tier -> cadence marks; absent: never runs there
    because: tuple[str, ...]  # the changed files that pull it in


@dataclass
class AffectedReport:
    cases: list[AffectedCase] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)  # changed files that affect no serve case
    warnings: list[str] = field(default_factory=list)

    def ids(self, tier: Tier) -> list[str]:
        """The affected ids `tier` runs: their profile has that tier and does not skip them."""
        return [case.test_id for case in self.cases if tier in case.cadence]


def _profiles_of_repo_file(
    path: str, profiles: list[Profile], uses: Mapping[str, set[str]]
) -> list[Profile]:
    """The profiles a changed file of this repository affects (module docstring)."""
    if path in EVERYTHING_FILES or path.startswith(EVERYTHING_PREFIXES):
        return profiles
    if path.startswith("profiles/") and path.endswith((".yaml", ".yml")):
        return [p for p in profiles if _repo_path(p.source) == path]
    if path == CHECKOUT_RUNNER:
        return [p for p in profiles if p.upstream_launcher]
    if path.startswith(LAUNCHERS):
        return [p for p in profiles if p.launcher == path or path in uses.get(p.launcher, ())]
    return []


def _profiles_of_checkout_file(path: str, profiles: list[Profile]) -> list[Profile]:
    """The profiles a changed file of a Dynamo checkout affects (module docstring)."""
    if path.startswith(CHECKOUT_HELPERS):
        return [p for p in profiles if p.upstream_launcher]
    if path.startswith(CHECKOUT_PYTHON):
        package = path.removeprefix(CHECKOUT_PYTHON).split("/", 1)[0]
        if package not in ENGINE_PACKAGES:
            return profiles
        return [p for p in profiles if p.stack == f"dynamo-{package}"]
    return [p for p in profiles if p.upstream_launcher == path]


def _repo_path(source: str) -> str:
    """A profile's absolute `source` as a repo path: '/r/profiles/a.yaml' -> 'profiles/a.yaml'."""
    marker = "/profiles/"
    return "profiles/" + source.split(marker, 1)[1] if marker in source else source


def case_cadence(profile: Profile, tiers: Iterable[Tier]) -> dict[str, dict[Tier, tuple[str, ...]]]:
    """test id -> {tier: cadence marks}, for the tiers where the profile does not skip the case."""
    out: dict[str, dict[Tier, tuple[str, ...]]] = {}
    for case in profile.cases:
        tid = profile.test_id(case)
        out[tid] = {}
        for tier in tiers:
            skip = case.cpu_skip if tier == "cpu" else case.gpu_skip
            if profile.tier(tier) is not None and not skip:
                out[tid][tier] = tuple(cadence_marks(profile, tier, case))
    return out


def affected(
    changed: Iterable[str],
    profiles: list[Profile],
    texts: Mapping[str, str] | None = None,
    tiers: tuple[Tier, ...] = TIERS,
    *,
    checkout: bool = False,
) -> AffectedReport:
    """The serve cases the changed files affect, with each tier's cadence marks.
    `texts`: the launcher and launchers/lib files (repo path -> text) that say which launcher
    uses which file; default: read from launchers/. `checkout`: the paths are a Dynamo
    checkout's, not this repo's (launchers/ is not read)."""
    if texts is None:
        texts = {} if checkout else launcher_texts()
    uses = {p.launcher: files_used_by(p.launcher, texts) for p in profiles}
    report = AffectedReport()
    because: dict[str, list[str]] = {}
    cadence: dict[str, tuple[str, dict[Tier, tuple[str, ...]]]] = {}
    changed = sorted(dict.fromkeys(changed))
    for path in changed:
        hit = (
            _profiles_of_checkout_file(path, profiles)
            if checkout
            else _profiles_of_repo_file(path, profiles, uses)
        )
        if not hit:
            report.unmapped.append(path)
        for profile in hit:
            for tid, per_tier in case_cadence(profile, tiers).items():
                cadence[tid] = (profile.name, per_tier)
                because.setdefault(tid, []).append(path)
        if path.startswith(LAUNCHERS) and not checkout:
            report.warnings += launcher_warnings(path, hit, tiers)
    report.cases = [
        AffectedCase(tid, cadence[tid][0], cadence[tid][1], tuple(because[tid]))
        for tid in sorted(cadence)
    ]
    return report


def launcher_warnings(path: str, profiles: list[Profile], tiers: tuple[Tier, ...]) -> list[str]:
    """A changed launcher file that no pre_merge case exercises is not tested before merge."""
    if not profiles:
        return [f"{path}: changed launcher code that no profile uses: no serve test covers it"]
    marks: set[str] = set()
    ids: list[str] = []
    for profile in profiles:
        for tid, per_tier in case_cadence(profile, tiers).items():
            ids.append(tid)
            marks.update(m for tier_marks in per_tier.values() for m in tier_marks)
    if PRE_MERGE in marks:
        return []
    only = ", ".join(sorted(marks)) or "no cadence (every case skipped)"
    return [
        f"{path}: changed launcher is covered only by {only} tests ({len(ids)} case(s), e.g. "
        f"{ids[0]}); no pre_merge test runs it, so this change is untested until after merge. "
        "Run the listed ids now, or give one case of these profiles a pre_merge mark."
    ]


SERVE_TEST = "tests/serve/test_serve.py::test_serve"


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("affected", help="changed files -> serve test ids")
    parser.add_argument("files", nargs="*", help="changed files (default: from git)")
    parser.add_argument(
        "--base",
        metavar="REF",
        help="git ref: files changed in REF...HEAD plus uncommitted and untracked ones",
    )
    add_tier_option(parser, all_by_default=True)
    parser.add_argument("--nodeids", action="store_true", help="print pytest node ids only")
    parser.add_argument(
        "--dynamo-src",
        metavar="PATH",
        help="the changed files are this Dynamo checkout's (its launchers and Python): the ids "
        "that run them under --dynamo-src",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a changed launcher lacks pre_merge"
    )
    add_profiles_option(parser)
    return parser


def git_lines(*args: str, repo: Path = REPO_ROOT) -> list[str]:
    try:
        out = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise CliError(f"git -C {repo} {' '.join(args)} failed: {exc.stderr.strip()}") from None
    return [line for line in out.splitlines() if line]


def changed_files(base: str | None, repo: Path = REPO_ROOT) -> list[str]:
    """Committed since the merge base with `base` (if given), staged, unstaged and untracked,
    in this repository or a Dynamo checkout."""
    files = git_lines("diff", "--name-only", f"{base}...HEAD", repo=repo) if base else []
    files += git_lines("diff", "--name-only", "HEAD", repo=repo)
    files += git_lines("ls-files", "--others", "--exclude-standard", repo=repo)
    return list(dict.fromkeys(files))


def repo_relative(path: str) -> str:
    resolved = Path(path).resolve() if Path(path).exists() or Path(path).is_absolute() else None
    if resolved is None:
        return Path(path).as_posix().removeprefix("./")
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        raise CliError(f"{path} is outside the repository {REPO_ROOT}") from None


def launcher_texts() -> dict[str, str]:
    return {
        p.relative_to(REPO_ROOT).as_posix(): p.read_text(errors="replace")
        for p in (REPO_ROOT / LAUNCHERS).rglob("*")
        if p.is_file()
    }


def render(report: AffectedReport, nodeids: bool) -> str:
    if nodeids:
        return "\n".join(f"{SERVE_TEST}[{case.test_id}]" for case in report.cases)
    width = max((len(c.test_id) for c in report.cases), default=0)
    upstream = upstream_ids()
    lines = []
    for case in report.cases:
        cadence = "  ".join(
            f"{tier}: {','.join(marks) or '-'}" for tier, marks in case.cadence.items()
        )
        tag = f"  {UPSTREAM_TAG}" if case.test_id in upstream else ""
        lines.append(f"{case.test_id:<{width}}  {cadence or 'skipped on every tier'}{tag}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.files and args.base:
        raise CliError("give either --base REF or FILE…, not both")
    checkout = Path(args.dynamo_src).resolve() if args.dynamo_src else None
    if args.files:
        files = args.files if checkout else [repo_relative(f) for f in args.files]
    else:
        files = changed_files(args.base, checkout or REPO_ROOT)
    if not args.files and not args.base:
        print("affected: no --base given: uncommitted and untracked changes only", file=sys.stderr)
    chosen = tier_chosen(args.tier)
    tiers: tuple[Tier, ...] = (chosen,) if chosen else TIERS
    report = affected(files, profiles_in(args.profiles), tiers=tiers, checkout=bool(checkout))
    text = render(report, args.nodeids)
    if text:
        print(text)
    print(
        f"affected: {len(files)} changed file(s) -> {len(report.cases)} serve case(s); "
        f"no serve case: {', '.join(report.unmapped) or '-'}",
        file=sys.stderr,
    )
    for warning in report.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    return 1 if args.strict and report.warnings else 0
