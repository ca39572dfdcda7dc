"""Loading profiles from YAML: every error names the file and the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from harness.profiles.schema import Profile


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and field."""


def load_profile(path: Path, root: Path) -> Profile:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    try:
        profile = Profile.model_validate({**raw, "source": str(path)})
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join(str(p) for p in err['loc']) or '<top>'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise ProfileError("\n".join(lines)) from None
    if not (root / profile.launcher).is_file():
        raise ProfileError(f"{path}: launcher: no such file {root / profile.launcher}")
    return profile


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
            tid = p.test_id(case)
            if tid in seen:
                raise ProfileError(f"{p.source}: test id {tid} also defined in {seen[tid]}")
            seen[tid] = p.source
    return profiles
