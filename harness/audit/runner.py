"""Audit profiles: every (tier, launcher args) a profile launches, captured and checked."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.audit.capture import Finding, plan_for, run_launcher
from harness.audit.engine_flags import table
from harness.audit.launch_check import LaunchCheck
from harness.audit.sglang_registration import check_sglang_registration, sglang_multimodal_source
from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import DynamoSource
from harness.launch.launch_spec import launcher_args
from harness.profiles import CaseSpec, Profile, Tier, load_profile

TIERS: tuple[Tier, ...] = ("gpu", "cpu")


@dataclass
class AuditResult:
    findings: list[Finding] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)
    seconds: float = 0.0


def variants(profile: Profile) -> list[tuple[Tier, CaseSpec]]:
    """One case per distinct launch (tier, launcher args), skipping cases a tier skips."""
    seen: dict[tuple[Tier, tuple[str, ...]], CaseSpec] = {}
    for tier in TIERS:
        if profile.tier(tier) is None or (tier == "gpu" and profile.gpu_skip):
            continue
        for case in profile.cases:
            if (case.cpu_skip if tier == "cpu" else case.gpu_skip) is not None:
                continue
            seen.setdefault((tier, tuple(launcher_args(profile, tier, case))), case)
    return [(key[0], case) for key, case in seen.items()]


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def adapter_rewrites(log_dir: Path) -> list[str]:
    """What the role adapter decided for each role (its NAME.adapter.json), one line per role."""
    lines = []
    for path in sorted(log_dir.glob("*.adapter.json")):
        record = json.loads(path.read_text())
        if record["rewrites"]:
            lines.append(f"  adapter, role {record['role']}: {'; '.join(record['rewrites'])}")
    return lines


def audit_profile(
    profile: Profile, root: Path, result: AuditResult, source: DynamoSource | None = None
) -> None:
    merged: dict[tuple[str, str, str, str], list[str]] = {}
    for tier, case in variants(profile):
        with tempfile.TemporaryDirectory(prefix="audit-") as tmp:
            plan = plan_for(profile, tier, case, Path(tmp), root, source)
            cap = run_launcher(plan, Path(tmp))
            label = " ".join([tier, *plan.args])
            result.launches.append(f"{profile.name} [{label}]: roles {sorted(cap.roles)}")
            result.launches += adapter_rewrites(plan.log_dir)
            launcher = _display(plan.launcher, root)
            found = [
                finding
                for check in LaunchCheck.every()
                if tier in check.tiers
                for finding in check.check(profile, cap, launcher)
            ]
        for f in found:
            merged.setdefault((f.file, f.role, f.what, f.fix), []).append(label)
    for (file, role, what, fix), labels in merged.items():
        result.findings.append(Finding(file, role, f"{what} (launch: {'; '.join(labels)})", fix))


def sglang_table_finding() -> Finding | None:
    """The checked-in SGLang flag table must match the SGLang that ai-dynamo pins."""
    try:
        requires = importlib.metadata.requires("ai-dynamo") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    pins = [m.group(1) for r in requires if (m := re.match(r"sglang(?:\[[^]]*\])?==([\w.]+)", r))]
    have = table()["version"]
    if pins and pins[0] != have:
        what = f"flag table is for SGLang {have}, ai-dynamo pins {pins[0]}"
        fix = "regenerate it: python -m harness.audit.sglang_flags_dump"
        return Finding("harness/audit/sglang_flags.json", "-", what, fix)
    return None


def audit(
    paths: list[Path], root: Path = REPO_ROOT, source: DynamoSource | None = None
) -> AuditResult:
    """`source`: the Dynamo checkout whose launchers and Python are audited (None: ours and the
    installed ones)."""
    start = time.monotonic()
    result = AuditResult()
    profiles = [load_profile(p, root) for p in paths]
    for profile in profiles:
        audit_profile(profile, root, result, source)
    if any(p.stack == "dynamo-sglang" for p in profiles):
        if stale := sglang_table_finding():
            result.findings.append(stale)
        result.findings += check_sglang_registration(sglang_multimodal_source(source))
    result.seconds = time.monotonic() - start
    return result
