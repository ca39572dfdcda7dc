"""`python -m harness check [--tier]`: can this machine run the serve suite? One line per check
(ok / warn / fail); exit 1 if any check fails. Starts no topology and stops nothing."""

from __future__ import annotations

import argparse
import os
from typing import Any

from harness.cli.common import add_profiles_option, profiles_in, reports_user_errors
from harness.cli.machine_check import check_machine
from harness.core.secrets import scrub_text
from harness.resources.gpu_inventory import GpuInventory


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check", help="can this machine run the serve suite (tier, packages, models, leftovers)"
    )
    parser.add_argument("--tier", default="auto", choices=["auto", "cpu", "gpu"])
    add_profiles_option(parser)
    return parser


@reports_user_errors
def run(args: argparse.Namespace) -> int:
    from harness.resources.tier import detect_tier

    inventory, source = GpuInventory.detect_with_source()
    tier = detect_tier(args.tier, len(inventory.devices))
    findings = check_machine(profiles_in(args.profiles), tier, inventory, source)
    for finding in findings:
        print(scrub_text(finding.line(), os.environ), flush=True)  # e.g. a token in a URL
    failed = [f for f in findings if f.status == "fail"]
    print(f"{len(failed)} failed, {sum(f.status == 'warn' for f in findings)} warning(s)")
    return 1 if failed else 0
