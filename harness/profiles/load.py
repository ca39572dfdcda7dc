"""Profiles as the suite reads them: loaded from YAML, and the marks each of their cases carries.

- `load_profiles`, `load_profile`: profiles loaded and cross-checked; every error
  (`ProfileError`) names the file and the field.
- `mark_names`, `cadence_marks`: the pytest mark names a serve case carries, as plain strings
  (shared by the plugin and CLI)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.profiles.schema import CADENCE_MARKS, CaseSpec, KnownDefect, Profile, Tier


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and field."""


# YAML anchors the profiles of one directory share (e.g. a defect two topologies show), put in
# front of each profile's text; `.yml`, so the profile globs (`*.yaml`) never take it for one.
SHARED_ANCHORS = "known_defects.yml"


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"key {key!r} given twice")
        self.key, self.line = key, line


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (PyYAML's own keeps the
    last in silence). A merge (`<<: *anchor`) may still be overridden: that is what it is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def raw_profile(path: Path) -> dict[str, Any]:
    """The profile's mapping, its directory's shared anchors resolved and the `x-…` keys that
    held anchors (docker-compose's extension fields) left out. A key given twice is refused,
    naming the file and line."""
    shared = path.parent / SHARED_ANCHORS
    before = shared.read_text() if shared.is_file() else ""
    try:
        raw = yaml.load(before + path.read_text(), Loader=UniqueKeyLoader)
    except DuplicateKey as twice:
        offset = before.count("\n")
        where = f"{path}:{twice.line - offset}" if twice.line > offset else f"{shared}:{twice.line}"
        raise ProfileError(f"{where}: {twice}: a YAML key is given once") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    return {k: v for k, v in raw.items() if not str(k).startswith("x-")}


def load_profile(path: Path, root: Path) -> Profile:
    raw = raw_profile(path)
    try:
        profile = Profile.model_validate({**raw, "source": str(path)})
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join(str(p) for p in err['loc']) or '<top>'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise ProfileError("\n".join(lines)) from None
    unread = unproven_defects(profile, root)
    launcher = root / profile.launcher
    if not launcher.is_file():
        raise ProfileError(f"{path}: launcher: no such file {launcher}")
    if not os.access(launcher, os.X_OK):  # what the launch would refuse later (check_launcher)
        raise ProfileError(f"{path}: launcher: {launcher} is not executable (chmod +x it)")
    if unread:
        raise ProfileError("\n".join(f"{path}: {field}: {problem}" for field, problem in unread))
    return profile


def unproven_defects(profile: Profile, root: Path) -> list[tuple[str, str]]:
    """(field, problem) for each declared defect whose proof is not in the docs: the file must
    exist and hold a heading with the anchor, and that section must name the test id."""
    problems = []
    for i, case in enumerate(profile.cases):
        requests = [("", case), *((f".follow_ups[{j}]", f) for j, f in enumerate(case.follow_ups))]
        for where, request in requests:
            for defect in request.cpu.defects:
                problems += _unproven(profile, case, f"cases[{i}]{where}", defect, root)
    return problems


def _unproven(
    profile: Profile, case: CaseSpec, where: str, defect: KnownDefect, root: Path
) -> list[tuple[str, str]]:
    """The problem with one declared defect's proof, if any."""
    field = f"{where}.cpu.known_defect.proof"
    doc, _, anchor = defect.proof.partition("#")
    section = markdown_section(root / doc, anchor)
    if section is None:
        return [(field, f"{defect.proof}: no such file or heading")]
    if profile.test_id(case) not in section:
        return [(field, f"{defect.proof} does not name {profile.test_id(case)}")]
    return []


def markdown_section(doc: Path, anchor: str) -> str | None:
    """The text under the heading whose GitHub anchor is `anchor`, up to the next heading of the
    same or a higher level; None if the file or the heading is missing."""
    if not doc.is_file():
        return None
    lines = doc.read_text().splitlines()
    levels = [len(line) - len(line.lstrip("#")) if line.startswith("#") else 0 for line in lines]
    for i, line in enumerate(lines):
        if levels[i] and heading_anchor(line[levels[i] :]) == anchor:
            ends = (j for j in range(i + 1, len(lines)) if 0 < levels[j] <= levels[i])
            return "\n".join(lines[i : next(ends, len(lines))])
    return None


def heading_anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
    >>> heading_anchor(" LLaVA encoder: feature layer & CLS row")
    'llava-encoder-feature-layer--cls-row'
    """
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def unknown_baselines(profile: Profile, profiles: list[Profile]) -> list[str]:
    """`same_as` must name a topology that some profile of the same stack and model defines."""
    known = sorted(
        {
            p.topology
            for p in profiles
            if p.stack == profile.stack and p.model.short_name == profile.model.short_name
        }
    )
    problems = []
    for i, case in enumerate(profile.cases):
        requests = [("", case), *((f".follow_ups[{j}]", f) for j, f in enumerate(case.follow_ups))]
        for where, request in requests:
            wanted = request.cpu.same_as
            if wanted is not None and wanted not in known:
                problems.append(
                    f"{profile.source}: cases[{i}]{where}.cpu.same_as: {wanted!r} is no topology "
                    f"of a {profile.model.short_name} profile ({', '.join(known)})"
                )
    return problems


def load_profiles(directory: Path, root: Path) -> list[Profile]:
    profiles = [load_profile(p, root) for p in sorted(directory.rglob("*.yaml"))]
    names: dict[str, str] = {}
    for p in profiles:
        if p.name in names:
            raise ProfileError(f"{p.source}: name: {p.name} is also the name of {names[p.name]}")
        names[p.name] = p.source
    seen: dict[str, str] = {}
    for p in profiles:
        for case in p.cases:
            key = p.test_id(case)
            if key in seen:
                raise ProfileError(f"{p.source}: test id {key} also defined in {seen[key]}")
            seen[key] = p.source
    problems = [line for p in profiles for line in unknown_baselines(p, profiles)]
    if problems:
        raise ProfileError("\n".join(problems))
    return profiles


def mark_names(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """E.g. ``["post_merge", "multimodal", "vllm", "gpu_1"]`` for agg Qwen3-VL on the GPU tier:
    profile marks, then the tier's, then the case's (a case's cadence mark replaces theirs, as
    upstream's MmCase marks do); stack; ``gpu_N`` or ``cpu``."""
    spec = profile.tier(tier)
    tier_marks = spec.marks if spec else []
    inherited = [*profile.marks, *tier_marks]
    if any(m in CADENCE_MARKS for m in case.marks):  # a case's cadence replaces the profile's
        inherited = [m for m in inherited if m not in CADENCE_MARKS]
    names = list(dict.fromkeys([*inherited, *case.marks]))
    names += ["multimodal", profile.stack.removeprefix("dynamo-")]
    device = "xpu" if profile.accelerator == "xpu" else "gpu"
    names.append(f"{device}_{profile.gpu.gpus}" if tier == "gpu" else "cpu")
    return names


def cadence_marks(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """Only the cadence marks (pre_merge / post_merge / nightly), in mark order."""
    return [m for m in mark_names(profile, tier, case) if m in CADENCE_MARKS]
