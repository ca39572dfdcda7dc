"""Dry-run launchers behind recording shims (no engine starts) and check ports, health sources,
engine flags and model registration against each profile, on every tier it has. Exit 1 on any
finding."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.main import DEFAULT_PROFILES, CliError, profile_named
from harness.launch.dynamo_src import DynamoSource

ORDER = 40  # its place in `serve-harness --help` (harness/cli/main.py)

NAME = "audit"


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="check launchers against profiles without engines")
    p.add_argument(
        "profiles",
        nargs="*",
        metavar="PROFILE",
        help="profile names (as `up` takes them) or YAML paths (default: every profile)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list every audited launch")
    p.add_argument(
        "--dynamo-src",
        metavar="PATH",
        help="a Dynamo checkout: its launchers (`dynamo-src:` profiles) are audited too, with "
        "every rewrite the role adapter makes (also HARNESS_DYNAMO_SRC)",
    )
    return p


EXAMPLES = """examples:
  serve-harness audit                          # every profile
  serve-harness audit agg_qwen3-vl-2b          # one profile, by name
  serve-harness audit profiles/vllm/epd_qwen3-vl-2b.yaml --dynamo-src ~/dynamo"""


def profile_paths(names: list[str]) -> list[Path]:
    """Each argument as a profile file: an existing YAML path, else a profile's name."""
    paths = []
    for name in names:
        path = Path(name)
        if path.suffix in (".yaml", ".yml") and not path.is_file():
            raise CliError(f"no such profile file {name}")
        paths.append(path if path.is_file() else Path(profile_named(DEFAULT_PROFILES, name).source))
    return paths


def run(args: argparse.Namespace) -> int:
    from harness.audit.engine_flags import table
    from harness.audit.runner import audit

    source = DynamoSource(Path(args.dynamo_src).resolve()) if args.dynamo_src else None
    paths = profile_paths(args.profiles) or sorted(DEFAULT_PROFILES.rglob("*.yaml"))
    result = audit([p.resolve() for p in paths], source=source)
    if args.verbose:
        for launch in result.launches:
            print(f"audited {launch}")
    for finding in result.findings:
        print(finding.line())
    print(
        f"audit: {len(paths)} profile(s), {len(result.launches)} launch(es), "
        f"{len(result.findings)} finding(s) in {result.seconds:.1f} s. Engine flags: dynamo.vllm "
        "and dynamo.frontend by their installed parsers; dynamo.sglang by its installed Dynamo "
        f"arg groups + SGLang's flag table ({table()['source'][:60]}…), since SGLang lives in "
        "its own venv (its transformers pin differs from vLLM's)."
    )
    return 1 if result.findings else 0
