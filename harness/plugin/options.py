"""The plugin's options and the session they decide (pytest's configure phase): tier, target,
GPU inventory and the Dynamo under test, in one typed object in `config.stash`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.core.settings import EdgeSettings
from harness.launch.dynamo_src import (
    DYNAMO_PYTHON_ENV,
    DYNAMO_SRC_ENV,
    DynamoSource,
    DynamoSourceError,
)
from harness.launch.plan import remove_scratch_of
from harness.launch.target import TargetError, TargetSpec, check_target, load_target
from harness.machine.gpus import GpuInventory
from harness.machine.tier import detect_tier
from harness.profiles import ProfileError, Tier, load_profiles
from harness.topology.processes import sweep_stale, term_raises_interrupt


@dataclass(frozen=True)
class HarnessSession:
    """What the whole session runs under, decided once at configure time (config.stash)."""

    tier: Tier
    target: TargetSpec | None
    gpus: GpuInventory
    swept: tuple[str, ...] = ()  # leftovers of dead sessions this one stopped
    source: DynamoSource | None = None  # the Dynamo checkout under test (--dynamo-src)


SESSION = pytest.StashKey[HarnessSession]()


def session_of(config: pytest.Config) -> HarnessSession:
    return config.stash[SESSION]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("serve-harness")
    group.addoption(
        "--tier",
        default="auto",
        choices=["auto", "cpu", "gpu"],
        help="tier to run (default: gpu if NVML sees a GPU, else cpu)",
    )
    group.addoption("--results", default=None, help="append one JSON line per serve case here")
    group.addoption("--profiles", default=str(REPO_ROOT / "profiles"), help="profiles directory")
    group.addoption(
        "--target",
        default=None,
        metavar="FILE",
        help="run one profile's cases against a topology something else deployed (YAML: "
        "frontend, each role's health/metrics URL; harness/topology/topology.py); no launch",
    )
    group.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run shard K of N (cases that share a launch or a baseline stay together; balanced "
        "by --durations-from); also HARNESS_SHARD=K/N",
    )
    group.addoption(
        "--ids",
        default=None,
        metavar="ID,…",
        help="run exactly these serve ids and nothing else (unlike node ids, the baselines they "
        "are judged against are pulled in)",
    )
    group.addoption(
        "--dynamo-src",
        default=os.environ.get(DYNAMO_SRC_ENV) or None,
        metavar="PATH",
        help="a Dynamo checkout whose Python every role runs (PATH/components/src ahead of the "
        "installed wheel; each role's import is recorded and checked); also HARNESS_DYNAMO_SRC",
    )
    group.addoption(
        "--dynamo-python",
        default=os.environ.get(DYNAMO_PYTHON_ENV) or None,
        metavar="PYTHON",
        help="with --dynamo-src: the interpreter of your own environment, where you built the "
        "ai-dynamo-runtime the checkout pins (it runs the roles); without it an activated "
        "virtualenv with that runtime is used, else the pinned runtime is fetched from the "
        "package index; also HARNESS_DYNAMO_PYTHON",
    )
    group.addoption(
        "--strict-defects",
        action="store_true",
        default=os.environ.get("HARNESS_STRICT_DEFECTS") == "1",
        help="a declared upstream defect (known_defect) excuses nothing: its oracles fail, naming "
        "it (the unpatched side of an unpatched-versus-patched run); also HARNESS_STRICT_DEFECTS=1",
    )
    group.addoption(
        "--engine-alone-first",
        action="store_true",
        default=os.environ.get("HARNESS_ENGINE_ALONE_FIRST") == "1",
        help="compute every engine-alone reference before its topology starts and none beside it, "
        "as the GPU tier always does (its topology holds the card): the GPU tier's way, tried "
        "on the CPU tier; also HARNESS_ENGINE_ALONE_FIRST=1",
    )
    group.addoption(
        "--durations-from",
        default=str(REPO_ROOT / "runs" / "results.jsonl"),
        help="results.jsonl of earlier runs: the ETA counts each case by it (where it is missing: "
        "profiles/durations-cpu.json on the CPU tier), shards are balanced by it, and the GPU "
        "tier runs the longest groups first",
    )


def dynamo_src_option(path: str | None, python: str | None = None) -> DynamoSource | None:
    """The checkout every launch of this session runs (its Python on the runtime it pins:
    DynamoSource.with_runtime), resolved once here; each xdist worker resolves the same option."""
    if not path:
        return None
    try:
        return DynamoSource(Path(path).resolve()).with_runtime(Path(python) if python else None)
    except DynamoSourceError as exc:
        raise pytest.UsageError(str(exc)) from None


def load_target_option(config: pytest.Config) -> TargetSpec | None:
    option = config.getoption("--target")
    if not option:
        return None
    path = Path(option)
    try:
        spec = load_target(path)
        profiles = {
            p.name: p for p in load_profiles(Path(config.getoption("--profiles")), REPO_ROOT)
        }
        if spec.profile not in profiles:
            raise TargetError(f"{path}: profile: no profile named {spec.profile!r}")
        check_target(spec, profiles[spec.profile], path)
    except (TargetError, ProfileError) as exc:
        raise pytest.UsageError(str(exc)) from None
    return spec


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "vram_gib(n): GiB the largest GPU share of a case needs (its memory plan)"
    )
    inventory = GpuInventory.detect()
    target = load_target_option(config)
    tier = (
        target.tier
        if target
        else detect_tier(
            EdgeSettings.of(os.environ).tier_asked(config.getoption("--tier")),
            len(inventory.devices),
        )
    )
    source = dynamo_src_option(
        config.getoption("--dynamo-src"), config.getoption("--dynamo-python")
    )
    swept: list[str] = []
    if not hasattr(config, "workerinput"):
        swept = sweep_stale(str(REPO_ROOT), cleanup=remove_scratch_of)
    config.stash[SESSION] = HarnessSession(tier, target, inventory, tuple(swept), source)
    term_raises_interrupt()  # for the whole session: never restored


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = session_of(config)
    lines = [f"serve-harness tier: {session.tier} ({len(session.gpus.devices)} GPU(s) visible)"]
    lines += [f"serve-harness GPU left out: {why}" for why in session.gpus.refused]
    lines += [f"serve-harness swept a leftover of a dead session: {s}" for s in session.swept]
    return lines
