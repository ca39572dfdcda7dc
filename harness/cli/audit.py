"""`python -m harness audit [PROFILE…]`: dry-run launchers behind recording shims and check
ports, health sources, engine flags and model registration. Exit 1 on any finding."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from harness.core.paths import REPO_ROOT
from harness.topology.dynamo_src import DYNAMO_SRC_ENV

ORDER = 40  # its place in `serve-harness --help` (harness/cli/main.py)

NAME = "audit"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="check launchers against profiles without engines")
    p.add_argument("profiles", nargs="*", type=Path, help="profile YAML files (default: all)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every audited launch")
    p.add_argument(
        "--dynamo-src",
        metavar="PATH",
        help="a Dynamo checkout: its launchers (`dynamo-src:` profiles) are audited too, with "
        "every rewrite the role adapter makes (also HARNESS_DYNAMO_SRC)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from harness.audit.engine_flags import table
    from harness.audit.runner import audit

    if args.dynamo_src:
        os.environ[DYNAMO_SRC_ENV] = str(Path(args.dynamo_src).resolve())
    paths = args.profiles or sorted((REPO_ROOT / "profiles").rglob("*.yaml"))
    result = audit([p.resolve() for p in paths])
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
