"""One launch as a case asks for it (`LaunchSpec`), read from the profile once: what the launcher
runs with and which roles it starts. Everything below it (the port contract, the GPU lease, the
plan, the start) reads this value, never the profile's cases, requests or expectations.

- `LaunchSpec.of(profile, tier, case, source)`: the value; its `signature` says which cases share
  one launched topology.
- `choose_launcher`: under a Dynamo checkout (`--dynamo-src`), the script the checkout's own test
  matrix names for the case (by its upstream id, then by its profile's other ids, then by its
  stack and topology), else the profile's `upstream_launcher` where the checkout has no matrix
  files; where the checkout holds none, the launch is `missing` and never runs ours instead,
  except as the baseline a selected case is judged against (`baseline=True`): then ours runs it,
  on the checkout's Python, and says so.
- `layout_args`, `launcher_args`: how a profile's launcher is invoked for a case."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import PYTHON_ONLY, DynamoSource
from harness.launch.port_contract import PortContract, port_contract
from harness.profiles import Budget, CaseSpec, GpuTierSpec, ModelSpec, Profile, RoleSpec, Tier
from harness.profiles.checkout_case import matrix_match
from harness.profiles.checkout_matrix import MatrixEntry, matrix_at
from harness.profiles.launchers import text_with_used_files


@dataclass(frozen=True)
class LauncherChoice:
    """Which launcher a launch runs, and why (the results, `list` and the summary say it)."""

    script: Path  # the file that runs (ours, or the checkout's)
    origin: Literal["ours", "checkout"]
    why: str  # e.g. "tests/serve/test_sglang.py:212 names it for multimodal_e_pd_qwen"
    upstream_id: str | None = None  # the checkout's id for this case, where it has one
    missing: str | None = None  # the checkout holds no launcher for it: the case is not run
    model_flag: str = "--model"  # how the script takes the model (SGLang's agg: --model-path)
    extra_args: tuple[str, ...] = ()  # what the checkout's test passes beyond model and layout
    checkout: Path | None = None  # the checkout's root (origin "checkout")

    @property
    def named(self) -> str:
        """The script as results name it: ours by repo path, the checkout's as `<dir>:<path>`."""
        if self.missing:
            return "none (the checkout has no launcher for it)"
        if self.checkout is None:
            return str(self.script.relative_to(REPO_ROOT))
        return f"{self.checkout.name}:{self.script.relative_to(self.checkout)}"


@dataclass(frozen=True)
class LaunchSpec:
    name: str  # the profile's (runs, lease tags, HARNESS_PROFILE)
    stack: str
    tier: Tier
    model: ModelSpec
    launcher: Path  # ours
    upstream_launcher: str | None  # upstream's, relative to a Dynamo checkout (--dynamo-src)
    choice: LauncherChoice  # what runs: ours, or the checkout's (choose_launcher)
    source: DynamoSource | None  # the Dynamo checkout under test (--dynamo-src)
    args: tuple[str, ...]  # launcher_args
    env: Mapping[str, str]  # the profile's, then its tier's, then the case's
    roles: tuple[RoleSpec, ...]
    budget: Budget  # the tier's
    gpu: GpuTierSpec  # the profile's GPU tier (the memory plan reads it)
    accelerator: str  # cuda | xpu: the device kind the launcher selects devices for
    loopback_only: bool  # False where the profile says why a role listens on every interface
    wide_ports: tuple[str, ...]  # what the profile lets listen beyond loopback (its wide_ports)
    signature: str

    @classmethod
    def of(
        cls,
        profile: Profile,
        tier: Tier,
        case: CaseSpec,
        root: Path = REPO_ROOT,
        source: DynamoSource | None = None,
        baseline: bool = False,
    ) -> LaunchSpec:
        """`source`: the Dynamo checkout under test (--dynamo-src, resolved once by whoever took
        the option: the plugin, `audit`, `up`), None: the installed one. `baseline`: the launch
        gives a selected case its baseline answers (choose_launcher)."""
        spec = profile.tier(tier)
        if spec is None:
            raise ValueError(f"{profile.source}: profile {profile.name} has no {tier} tier")
        launcher = root / profile.launcher
        choice = choose_launcher(profile, case, launcher, source, baseline)
        args = tuple(launcher_args(profile, tier, case, choice))
        env = {**profile.env, **spec.env, **case.env}
        roles = tuple(profile.roles)
        key = {
            "launcher": str(choice.script),
            "args": list(args),
            "env": env,
            "model": profile.model.gpu if tier == "gpu" else profile.model.cpu,
            "tier": tier,
            "roles": [r.model_dump() for r in roles],
        }
        if source is not None:  # the same launcher on another Dynamo is another launch
            key["source"] = str(source.root)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        return cls(
            name=profile.name,
            stack=profile.stack,
            tier=tier,
            model=profile.model,
            launcher=launcher,
            upstream_launcher=profile.upstream_launcher,
            choice=choice,
            source=source,
            args=args,
            env=env,
            roles=roles,
            budget=spec.budget,
            gpu=profile.gpu,
            accelerator=profile.accelerator,
            loopback_only=profile.not_loopback is None,
            wide_ports=tuple(profile.wide_ports),
            signature=f"{Path(profile.launcher).stem}-{tier}-{digest}",
        )

    @property
    def worker_roles(self) -> tuple[RoleSpec, ...]:
        return tuple(r for r in self.roles if r.kind == "worker")

    @property
    def script(self) -> Path:
        """The launcher this launch runs (choose_launcher)."""
        return self.choice.script

    @cached_property
    def port_contract(self) -> PortContract:
        """The ports this launch is handed (port_contract.py), with the variables its launcher's
        text reads as a hint of what more to lease; computed once per launch."""
        text = text_with_used_files(self.script)
        return port_contract(self.worker_roles, self.stack, text)


def stack_words(profile: Profile) -> str:
    """'SGLang agg', 'vLLM E/P/D (xpu)': how a launch's kind reads in a message."""
    stack = {"dynamo-vllm": "vLLM", "dynamo-sglang": "SGLang"}.get(profile.stack, profile.stack)
    xpu = " on XPU" if profile.accelerator == "xpu" else ""
    return f"{stack} {profile.topology}{xpu}"


def choose_launcher(
    profile: Profile,
    case: CaseSpec,
    ours: Path,
    source: DynamoSource | None,
    baseline: bool = False,
) -> LauncherChoice:
    """Ours without a checkout. Under one: the script its matrix names for the case (its id, its
    profile's ids, its stack and topology); with no matrix files, the profile's
    `upstream_launcher`; where the checkout holds neither, `missing` says so (never ours), unless
    the launch is a `baseline` another case is judged against: its answers are the reference for
    what the checkout's Python gives on another topology, so ours runs it on that Python."""
    if source is None:
        return LauncherChoice(ours, "ours", "no Dynamo checkout under test")
    choice = _checkout_choice(profile, case, ours, source)
    if baseline and choice.missing:
        why = f"ours, as a baseline on the checkout's Python ({choice.missing})"
        return LauncherChoice(ours, "ours", why)
    return choice


def _checkout_choice(
    profile: Profile, case: CaseSpec, ours: Path, source: DynamoSource
) -> LauncherChoice:
    if (source.root / PYTHON_ONLY).is_file():
        why = (source.root / PYTHON_ONLY).read_text().strip()
        copy = source.root / ours.relative_to(REPO_ROOT)
        if copy.is_file():  # a tree that carries its own copy of ours (`mutate` builds one)
            return LauncherChoice(
                copy, "ours", f"the tree's copy of ours ({why})", checkout=source.root
            )
        return LauncherChoice(ours, "ours", f"the checkout holds Dynamo's Python only ({why})")
    matrix = matrix_at(source.root)
    if matrix is not None:
        entries = matrix.of(profile.stack, profile.accelerator)
        match = matrix_match(profile, case, entries)
        if match is not None:
            entry, how, own = match
            return LauncherChoice(
                source.root / entry.script,
                "checkout",
                f"{entry.where} {how}",
                checkout=source.root,
                upstream_id=entry.id if own else None,
                model_flag=entry.model_flag,
                extra_args=entry.extra_args if own else (),
                missing=_absent(source, entry.script, entry.where),
            )
        mapped = matrix.for_topology(profile.stack, profile.accelerator, profile.topology)
        if mapped is not None:
            return LauncherChoice(
                source.root / mapped.script,
                "checkout",
                f"{mapped.where} names it for topology {profile.topology}",
                checkout=source.root,
                model_flag=_model_flag(
                    matrix.of(profile.stack, profile.accelerator), mapped.script
                ),
                missing=_absent(source, mapped.script, mapped.where),
            )
    default = profile.upstream_launcher
    if default and (source.root / default).is_file():
        names = "its matrix names none for it" if matrix else "it has no test matrix files"
        return LauncherChoice(
            source.root / default,
            "checkout",
            f"{default} (the profile's default: {names})",
            checkout=source.root,
        )
    looked = f"its matrix ({', '.join(matrix.files)}) names none" if matrix else "no matrix files"
    tail = f", and {default} is not there" if default else ""
    return LauncherChoice(
        ours,
        "checkout",
        f"{default or '(none)'}",
        missing=f"the checkout has no launcher for {stack_words(profile)}: {looked}{tail}",
    )


def _model_flag(entries: list[MatrixEntry], script: str) -> str:
    """How the matrix's ids pass the model to this script (`--model`, or `--model-path`)."""
    return next((e.model_flag for e in entries if e.script == script), "--model")


def _absent(source: DynamoSource, script: str, where: str) -> str | None:
    if (source.root / script).is_file():
        return None
    return f"the checkout's {where} names {script}, which is not in the checkout"


def layout_args(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """What makes one launch of a profile differ from another: the tier's layout flags, then
    the case's (a deployed target states the same, `launcher_args` in its file)."""
    spec = profile.tier(tier)
    assert spec is not None
    return [*spec.launcher_args, *case.launcher_args]


def flag_units(args: tuple[str, ...] | list[str]) -> list[list[str]]:
    """['--a', '1', '--b'] -> [['--a', '1'], ['--b']]: each flag with the words that follow it."""
    units: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not units:
            units.append([arg])
        else:
            units[-1].append(arg)
    return units


def launcher_args(
    profile: Profile, tier: Tier, case: CaseSpec, choice: LauncherChoice | None = None
) -> list[str]:
    """As upstream's tests invoke a launcher: the profile's model first (by the flag the chosen
    script takes it), then layout_args, then what the checkout's test for this id passes
    beyond them (a flag ours already passes is not repeated)."""
    flag = choice.model_flag if choice else "--model"
    args = [flag, profile.model.gpu, *layout_args(profile, tier, case)]
    have = {unit[0] for unit in flag_units(args)}
    for unit in flag_units(choice.extra_args if choice else ()):
        if unit[0] not in have:
            args += unit
    return args
