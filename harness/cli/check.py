"""Can this machine run the serve suite, and if not, why: tier, installed packages against their
pins, models, memory, leftovers of killed sessions, docker. Minutes before a launch would find out.

Each check returns Findings; nothing is launched and nothing is stopped (tiny CPU models are built
into their cache if missing, as the first test would).

`python -m harness check [--tier]`: can this machine run the serve suite? One line per check
(ok / warn / fail); exit 1 if any check fails. Starts no topology and stops nothing."""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os
import runpy
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.cli.main import add_profiles_option, add_tier_option, profiles_in
from harness.core.paths import REPO_ROOT, SGLANG_VENV, sglang_venv_left_out
from harness.core.secrets import scrub_text
from harness.core.settings import EdgeSettings
from harness.core.verdict import TopologyFailure
from harness.machine.engines import STACK_ENGINE, engine_pins, lock_mismatches, lock_versions
from harness.machine.gpus import GIB, GpuDevice, GpuInventory
from harness.machine.port_registry import PortRegistry
from harness.profiles import Profile, Tier
from harness.topology.processes import describe_stale, stale_processes

ORDER = 10  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness check               # this machine's tier
  serve-harness check --tier cpu"""

Status = Literal["ok", "info", "warn", "fail"]  # info: reported, not judged
DYNAMO = "ai-dynamo"
# ai-dynamo requires it, but it is a stub sdist fetched from outside PyPI and only the planner
# uses it, so bootstrap installs ai-dynamo with --no-deps (requirements/gpu-vllm.txt).
NOT_INSTALLED = {"aisimulate"}
# Peak RSS of the largest CPU topology (E/P/D, bench/footprint.py) plus headroom for pytest.
CPU_MEMORY_NEED_GIB = 6.0
# An idle GPU shows a few hundred MiB in use (driver, context); vLLM's own tests allow 2 GiB.
GPU_IDLE_USED_GIB = 2.0


@dataclass(frozen=True)
class Finding:
    status: Status
    what: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.what:<10}  {self.detail}"


def tier_findings(tier: Tier, inventory: GpuInventory, source: str) -> list[Finding]:
    """Which tier runs and why; on the GPU tier, each GPU and its free memory. `source`: where
    the inventory came from, or why NVML gave none (`GpuInventory.detect_with_source`)."""
    if inventory.devices:
        gpus = [gpu_finding(d) for d in inventory.devices]
        seen = f"{len(inventory.devices)} GPU(s) seen by {source}"
    else:
        gpus, seen = [], f"no GPU seen ({source})"
    status: Status = "warn" if tier == "gpu" and not inventory.devices else "ok"
    return [Finding(status, "tier", f"{tier}: {seen}"), *gpus]


def gpu_finding(device: GpuDevice) -> Finding:
    """A GPU already holding memory before any test (another job, a leaked engine) is a warning:
    cases leased onto it may not fit."""
    used_gib = (device.total_bytes - device.free_bytes) / GIB
    detail = device.describe()
    if used_gib > GPU_IDLE_USED_GIB:
        return Finding("warn", "gpu", f"{detail}; {used_gib:.1f} GiB held by another process")
    return Finding("ok", "gpu", detail)


def lock_findings(lock: Path, version_of: Callable[[str], str | None]) -> list[Finding]:
    """Every `name==version` pin of the lock installed at exactly that version."""
    pins = [
        line.split("==", 1)
        for line in lock.read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    ]
    wrong = [
        f"{name} {version_of(name) or 'missing'} (pinned {want})"
        for name, want in pins
        if version_of(name) != want
    ]
    where = lock.relative_to(REPO_ROOT) if lock.is_relative_to(REPO_ROOT) else lock
    if not wrong:
        return [Finding("ok", "packages", f"{len(pins)} pins of {where} installed as pinned")]
    shown = "; ".join(wrong[:5]) + (f"; … {len(wrong) - 5} more" if len(wrong) > 5 else "")
    return [Finding("fail", "packages", f"{where}: {shown}. Run scripts/bootstrap.sh")]


def extra_findings(
    stacks: Iterable[str], dynamo_requires: Sequence[str], version_of: Callable[[str], str | None]
) -> list[Finding]:
    """GPU tier: for each stack whose engine is installed, everything ai-dynamo requires with that
    extra (`ai-dynamo[vllm]`) at the versions it pins, except what bootstrap leaves out on purpose.
    A stack without its engine is a warning (its cases are skipped); no engine at all fails."""
    findings = []
    for stack in sorted(set(stacks)):
        extra = STACK_ENGINE[stack]
        fix = f"HARNESS_GPU_STACK={extra} scripts/bootstrap.sh"
        if version_of(extra) is None:
            findings.append(
                Finding(
                    "warn",
                    "packages",
                    f"{stack}: {extra} is not installed "
                    f"here, its cases are skipped ({fix} builds a venv for them)",
                )
            )
            continue
        wrong = []
        for text in dynamo_requires:
            req = Requirement(text)
            if req.name in NOT_INSTALLED or (
                req.marker and not req.marker.evaluate({"extra": extra})
            ):
                continue
            have = version_of(req.name)
            if have is None or not req.specifier.contains(have, prereleases=True):
                wrong.append(f"{req.name} {have or 'missing'} (wants {req.specifier or 'any'})")
        status: Status = "fail" if wrong else "ok"
        detail = "; ".join(wrong[:5]) + f". Run {fix}" if wrong else "as ai-dynamo pins it"
        findings.append(Finding(status, "packages", f"{stack} ({DYNAMO}[{extra}]): {detail}"))
    if findings and all(f.status == "warn" for f in findings):
        findings.append(
            Finding(
                "fail",
                "packages",
                "no engine installed; run HARNESS_GPU_STACK=vllm|sglang scripts/bootstrap.sh",
            )
        )
    return findings


def shim_findings(site: Path, shims_script: Path) -> list[Finding]:
    """CPU tier: every compatibility shim of scripts/apply_shims.py that the versions installed in
    `site` need is in place there."""
    script = runpy.run_path(str(shims_script), run_name="apply_shims")
    shims, hooks = script["applicable"](site), script["STARTUP_HOOKS"]
    missing = [
        f"{shim.relpath} ({shim.why})"
        for shim in shims
        if not (site / shim.relpath).is_file() or shim.new not in (site / shim.relpath).read_text()
    ] + [f"{hook.name} ({hook.why})" for hook in hooks if not hook.applied(site)]
    if missing:
        return [
            Finding("fail", "shims", f"not applied: {'; '.join(missing)}. Run scripts/bootstrap.sh")
        ]
    needed_by = ", ".join(sorted({shim.needed_by for shim in shims}))
    return [
        Finding(
            "ok",
            "shims",
            f"{len(shims)} compatibility shims applied in {site} "
            f"(needed with {needed_by or 'nothing installed'}), "
            f"{len(hooks)} start-up hook(s)",
        )
    ]


def cpu_lock(engine: str | None = None) -> Path:
    """The lock of the CPU-tier engine lane this venv was built for (HARNESS_ENGINE, as
    scripts/bootstrap.sh reads it): `pinned` (requirements/cpu.lock) or `next`."""
    engine = engine or os.environ.get("HARNESS_ENGINE") or "pinned"
    if engine not in ("pinned", "next"):
        raise ValueError(f"HARNESS_ENGINE must be pinned or next, not {engine!r}")
    return REPO_ROOT / "requirements" / ("cpu.lock" if engine == "pinned" else "cpu-next.lock")


def engine_parity_findings(lock: Path, dynamo_requires: Sequence[str]) -> list[Finding]:
    """CPU tier: the lock installs the engines the installed ai-dynamo's [vllm] extra pins (the
    version every GPU runner gets). The next-engine lane is ahead by design: a warning."""
    wrong = lock_mismatches(engine_pins(dynamo_requires, "vllm"), lock_versions(lock))
    if not wrong:
        return [Finding("ok", "engine", f"{lock.name}: the engines {DYNAMO}[vllm] pins")]
    status: Status = "warn" if lock.name == "cpu-next.lock" else "fail"
    return [Finding(status, "engine", f"{lock.name}: {'; '.join(wrong)}")]


SGLANG_LOCK = REPO_ROOT / "requirements" / "cpu-sglang.lock"


def sglang_venv_findings(venv: Path, lock: Path, dynamo_requires: Sequence[str]) -> list[Finding]:
    """CPU tier: the venv the role adapter runs `dynamo.sglang` roles with (.venv-sglang) holds
    its lock as pinned, and the lock's sglang is the one ai-dynamo's [sglang] extra pins (only
    sglang: the extra's nixl[cu13] and cupy-cuda13x are the GPU's)."""
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites:
        why = "HARNESS_SGLANG_CPU=0" if sglang_venv_left_out() else "absent"
        return [
            Finding(
                "warn",
                "sglang",
                f"no SGLang venv at {venv} ({why}): the SGLang CPU cases skip; "
                "scripts/bootstrap.sh builds it",
            )
        ]
    found = {
        canonicalize_name(d.metadata["Name"]): d.version
        for d in metadata.distributions(path=[str(sites[0])])
    }
    installed = [
        Finding(f.status, "sglang", f"{venv.name}: {f.detail}")
        for f in lock_findings(lock, lambda name: found.get(canonicalize_name(name)))
    ]
    pin = engine_pins(dynamo_requires, "sglang").get("sglang")
    locked = lock_versions(lock).get("sglang")
    if pin == locked:
        return [*installed, Finding("ok", "sglang", f"sglang {locked}: the one {DYNAMO} pins")]
    return [
        *installed,
        Finding("fail", "sglang", f"{DYNAMO} pins sglang {pin}, {lock.name} has {locked}"),
    ]


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(canonicalize_name(name))
    except metadata.PackageNotFoundError:
        return None


def model_findings(profiles: Sequence[Profile], tier: Tier) -> list[Finding]:
    """CPU: each tiny checkpoint builds (or is cached). GPU: each model is in the HF cache."""
    from harness.machine.model_files import ensure_cached
    from harness.tiny_models import build_tiny_model

    findings = []
    if tier == "cpu":
        for family in sorted({p.model.cpu for p in profiles if p.model.cpu}):
            try:
                findings.append(
                    Finding("ok", "model", f"tiny {family}: {build_tiny_model(family)}")
                )
            except Exception as exc:  # any reason the first test would fail the same way
                findings.append(
                    Finding(
                        "fail",
                        "model",
                        f"tiny {family} does not build: {type(exc).__name__}: {exc}",
                    )
                )
        return findings
    for repo_id in sorted({p.model.gpu for p in profiles}):
        try:
            ensure_cached(repo_id)
            findings.append(Finding("ok", "model", f"{repo_id}: in the Hugging Face cache"))
        except TopologyFailure as failure:
            findings.append(Finding("fail", "model", failure.message))
    return findings


def memory_findings(tier: Tier, available_bytes: int, cores: int) -> list[Finding]:
    """CPU tier: room for the largest topology (E/P/D ~4.7 GiB) and at least two cores."""
    available = available_bytes / 2**30
    if tier == "gpu":
        return [Finding("info", "memory", f"{available:.1f} GiB available, {cores} cores")]
    short = available < CPU_MEMORY_NEED_GIB or cores < 2
    return [
        Finding(
            "warn" if short else "ok",
            "memory",
            f"{available:.1f} GiB available, {cores} cores (the CPU E/P/D topology peaks at "
            f"~4.7 GiB; {CPU_MEMORY_NEED_GIB:g} GiB and 2 cores recommended)",
        )
    ]


def leftover_findings(checkout: str, registry: PortRegistry) -> list[Finding]:
    """Processes of killed sessions of this checkout and live port leases (listed, not touched)."""
    stale = [describe_stale(proc, env) for proc, env in stale_processes(checkout)]
    findings = [
        Finding("warn", "leftovers", f"{d} (the next pytest session stops it)") for d in stale
    ]
    if not stale:
        findings.append(Finding("ok", "leftovers", "no process of a killed session is running"))
    leases = registry.leases()
    owners = sorted({lease.owner_pid for lease in leases})
    findings.append(
        Finding(
            "info",
            "ports",
            f"{len(leases)} live port lease(s) in {registry.path}"
            + (f", owners pid {', '.join(map(str, owners))}" if owners else ""),
        )
    )
    return findings


def docker_findings() -> list[Finding]:
    try:
        import docker

        version = docker.from_env().version().get("Version", "?")
    except Exception as exc:  # no SDK, no socket, daemon down: all mean "no docker here"
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        return [
            Finding(
                "warn",
                "docker",
                f"no daemon answers ({reason}); only "
                "`harness docker` needs one (.ci/docker_setup.sh start)",
            )
        ]
    return [Finding("ok", "docker", f"daemon {version} answers")]


def check_machine(
    profiles: Sequence[Profile], tier: Tier, inventory: GpuInventory, source: str
) -> list[Finding]:
    runnable = [p for p in profiles if p.tier(tier) is not None]
    findings = tier_findings(tier, inventory, source)
    findings += [Finding("warn", "gpu", why) for why in inventory.refused]
    if tier == "cpu":
        lock = cpu_lock()
        findings += lock_findings(lock, installed_version)
        requires = metadata.requires(DYNAMO) if installed_version(DYNAMO) else []
        findings += engine_parity_findings(lock, requires or [])
        site = Path(sysconfig.get_paths()["purelib"])
        findings += shim_findings(site, REPO_ROOT / "scripts" / "apply_shims.py")
        if any(p.stack == "dynamo-sglang" for p in runnable) and cpu_lock().name == "cpu.lock":
            findings += sglang_venv_findings(SGLANG_VENV, SGLANG_LOCK, requires or [])
    else:
        requires = metadata.requires(DYNAMO) if installed_version(DYNAMO) else []
        if not requires:
            findings.append(Finding("fail", "packages", f"{DYNAMO} is not installed"))
        findings += extra_findings((p.stack for p in runnable), requires or [], installed_version)
        findings += lock_findings(REPO_ROOT / "requirements" / "harness.txt", installed_version)
    findings += model_findings(runnable, tier)
    vm = psutil.virtual_memory()
    findings += memory_findings(tier, vm.available, psutil.cpu_count() or 1)
    findings += leftover_findings(str(REPO_ROOT), PortRegistry())
    return findings + docker_findings()


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "check", help="can this machine run the serve suite (tier, packages, models, leftovers)"
    )
    add_tier_option(parser)
    add_profiles_option(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from harness.machine.tier import detect_tier

    inventory, source = GpuInventory.detect_with_source()
    tier = detect_tier(EdgeSettings.of(os.environ).tier_asked(args.tier), len(inventory.devices))
    findings = check_machine(profiles_in(args.profiles), tier, inventory, source)
    for finding in findings:
        print(scrub_text(finding.line(), os.environ), flush=True)  # e.g. a token in a URL
    failed = [f for f in findings if f.status == "fail"]
    print(f"{len(failed)} failed, {sum(f.status == 'warn' for f in findings)} warning(s)")
    return 1 if failed else 0
