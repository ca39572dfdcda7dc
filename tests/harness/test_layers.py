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


# Below the edges (the CLI, the plugin) a module reads the process environment only for what is
# not a setting of the harness, each named with why (core/settings.py reads the settings once,
# at the edges). The list may shrink; a new entry is a setting read below the edges.
READS_ENVIRONMENT = {
    # where files live, read by every process of the harness (the role adapter, the engine-alone
    # worker, xdist workers), not only those behind an edge
    "harness.core.paths": "HARNESS_CACHE, HARNESS_RUNS, HARNESS_SGLANG_CPU: where files live",
    "harness.machine.lease_file": "where the port and GPU lease registries live",
    "harness.machine.model_files": "Hugging Face's own HF_HOME and its download permission",
    "harness.machine.gpus": "the devices this process may see (CUDA_VISIBLE_DEVICES, ...)",
    "harness.topology.topology": "the session id the controller hands its xdist workers; the "
    "environment a launch's processes inherit",
    # what a role's process is given: this process's environment, passed on
    "harness.launch.plan": "the environment a launch's processes inherit",
    "harness.launch.target": "the environment a deployed target's probes inherit",
    "harness.launch.dynamo_src": "the virtualenv this process runs in",
    "harness.audit.capture": "the environment a captured launch's processes inherit",
    "harness.audit.memory_checks": "a role's environment, simulated while its engine's parser runs",
    "harness.audit.engine_flags": "a role's environment, simulated while its engine's parser runs",
    "harness.cases.result_record": "the secrets' values to scrub from a results line",
    # runs in the engine's own process, not the harness's
    "harness.oracles.engine_alone_worker": "sets the engine's environment in its own process",
}
EDGES = ("plugin", "cli")
OUTSIDE = ("harness.launch.role_adapter", "harness.launch.role_site")  # a role's process


def environment_readers(root: Path) -> dict[str, list[int]]:
    """module -> the lines where it reads os.environ or os.getenv."""
    found: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path)
        if layer_of(module) in EDGES or module.startswith(OUTSIDE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                found.setdefault(module, []).append(node.lineno)
    return found


def test_below_the_edges_nothing_reads_the_environment_for_a_setting() -> None:
    readers = environment_readers(HARNESS)
    unlisted = {m: lines for m, lines in readers.items() if m not in READS_ENVIRONMENT}
    assert not unlisted, (
        f"read the environment below the edges: {unlisted}; read the setting at the edge "
        "(harness/core/settings.py) and hand it down"
    )
    assert not set(READS_ENVIRONMENT) - set(readers), "listed but no longer reading: unlist"
