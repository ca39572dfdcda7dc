"""Imports point one way: a harness module never imports from a layer above its own.

Layers, lowest first (docs/explanation/architecture.md): core, tiny_models, profiles, machine,
launch, topology, payloads, oracles, report, audit, cases, plugin, cli. Every import counts, lazy
ones inside functions and TYPE_CHECKING ones included: a lazy upward import is still an upward
dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT

LAYERS = (
    "core",
    "tiny_models",
    "profiles",
    "machine",
    "launch",
    "topology",
    "payloads",
    "oracles",
    "report",
    "audit",
    "cases",
    "plugin",
    "cli",
)
HARNESS = REPO_ROOT / "harness"


def layer_of(module: str) -> str | None:
    """'harness.launch.plan' -> 'topology'; 'harness.__main__' -> None (the entry point)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def harness_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every `import harness…` / `from harness… import` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("harness"):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("harness")]
    return found


def upward_imports(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        importer = module_name(path)
        own = layer_of(importer)
        if own is None:
            continue
        for line, imported in harness_imports(path):
            target = layer_of(imported)
            if target is None:
                problems.append(f"{importer}:{line} imports {imported}, which is in no layer")
            elif LAYERS.index(target) > LAYERS.index(own):
                problems.append(f"{importer}:{line} ({own}) imports {imported} ({target})")
    return problems


def test_every_harness_module_sits_in_a_layer() -> None:
    loose = [
        p.relative_to(REPO_ROOT).as_posix()
        for p in HARNESS.glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    ]
    subpackages = {p.name for p in HARNESS.iterdir() if (p / "__init__.py").is_file()}
    assert loose == [], "modules outside every layer"
    assert subpackages == set(LAYERS)


def test_no_module_imports_from_a_layer_above_it() -> None:
    assert upward_imports(HARNESS) == []


def test_an_upward_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walker itself can fail: a topology module importing the cases is named."""
    fake = tmp_path / "harness"
    (fake / "topology").mkdir(parents=True)
    (fake / "topology" / "bad.py").write_text(
        "def f():\n    from harness.cases.case import TopologyPool\n"
    )
    monkeypatch.setattr(f"{__name__}.REPO_ROOT", tmp_path)
    assert upward_imports(fake) == [
        "harness.topology.bad:2 (topology) imports harness.cases.case (cases)"
    ]
