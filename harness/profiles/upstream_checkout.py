"""Upstream Dynamo's multimodal serve ids read from a checkout's own files, not from the
catalogue: `tests/serve/multimodal_profiles/vllm.py` and `sglang.py` are parsed (never
imported: they import Dynamo, pytest plugins and GPU probes) and each `MultimodalModelProfile`,
each of its topologies and each `MmCase` there becomes the id upstream's generator makes of it,
`mm_{topology}_{short_name}[_{suffix}]`, with the facts that are literal in the file: the
cadence mark (the case's marks, else the topology's), the GPU marker (`gpu_1` unless the
topology or profile sets `gpu_marker`), the model, the cached-tokens payload's
`min_avg_kv_hit_rate`, follow-up payloads and an unconditional `pytest.mark.skip`. What the file
cannot say (why this repo does not carry an id, our own id for it) comes from the catalogue
entry of the same id; an id the catalogue lacks is listed with no reason, which `list
--upstream` reports as a finding."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.profiles.upstream import UpstreamTest

PROFILE_FILES = {  # the checkout's files, by the stack they configure
    "dynamo-vllm": "tests/serve/multimodal_profiles/vllm.py",
    "dynamo-sglang": "tests/serve/multimodal_profiles/sglang.py",
}
CADENCES = ("pre_merge", "post_merge", "nightly")
DEFAULT_GPU_MARKER = "gpu_1"  # MultimodalModelProfile.gpu_marker's default upstream


class UnreadableCheckout(ValueError):
    """A checkout whose profile files cannot be read as upstream's structure (names the file)."""


@dataclass(frozen=True)
class Call:
    """A call in the file, kept as data: `MmCase(suffix="b64", ...)` -> Call("MmCase", ...)."""

    func: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Opaque:
    """An expression the file computes at import (a probe, a subscript): not a fact."""

    source: str


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _Reader:
    """Evaluates the literal part of a module: constants, containers, names bound to them at
    module level, pytest marks as their dotted names, calls as `Call`s."""

    def __init__(self, tree: ast.Module, text: str) -> None:
        self.text = text
        self.names: dict[str, ast.expr] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name):
                    self.names[target.id] = stmt.value
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.value is not None
            ):
                self.names[stmt.target.id] = stmt.value

    def value(self, node: ast.expr, depth: int = 0) -> Any:
        if depth > 20:
            return Opaque(ast.get_source_segment(self.text, node) or "")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return [self.value(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {
                self.value(k, depth + 1): self.value(v, depth + 1)
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None
            }
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.value(self.names[node.id], depth + 1)
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted:
                return dotted
        if isinstance(node, ast.Call):
            func = _dotted(node.func) or ""
            return Call(
                func,
                tuple(self.value(a, depth + 1) for a in node.args),
                {k.arg: self.value(k.value, depth + 1) for k in node.keywords if k.arg},
            )
        if isinstance(node, ast.BinOp | ast.UnaryOp):
            try:
                return ast.literal_eval(node)
            except ValueError:
                pass
        return Opaque(ast.get_source_segment(self.text, node) or "")


def _profiles(path: Path) -> list[Call]:
    text = path.read_text()
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise UnreadableCheckout(f"{path}: not Python ({exc.msg}, line {exc.lineno})") from None
    reader = _Reader(tree, text)
    found: list[Call] = []

    def collect(value: Any) -> None:
        if isinstance(value, Call) and value.func.endswith("MultimodalModelProfile"):
            found.append(value)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for name, node in reader.names.items():
        if name.endswith("_PROFILES"):
            collect(reader.value(node))
    if not found:
        raise UnreadableCheckout(
            f"{path}: no MultimodalModelProfile(...) in a module-level *_PROFILES list"
        )
    return found


def _mark_names(marks: Any) -> list[str]:
    """`pytest.mark.post_merge` -> "post_merge"; a mark call by its name."""
    names = []
    for mark in marks if isinstance(marks, list) else []:
        dotted = mark.func if isinstance(mark, Call) else mark
        if isinstance(dotted, str) and dotted.startswith("pytest.mark."):
            names.append(dotted.removeprefix("pytest.mark."))
    return names


def _skip_reason(marks: Any) -> str | None:
    for mark in marks if isinstance(marks, list) else []:
        if isinstance(mark, Call) and mark.func == "pytest.mark.skip":
            reason = mark.kwargs.get("reason", mark.args[0] if mark.args else "")
            return reason if isinstance(reason, str) else "skipped upstream"
    return None


def _field(call: Call, name: str, where: str, kind: type) -> Any:
    value = call.kwargs.get(name)
    if not isinstance(value, kind):
        raise UnreadableCheckout(f"{where}: {call.func}.{name} is not a literal {kind.__name__}")
    return value


def _hit_rate(payload: Any) -> float | None:
    if isinstance(payload, Call) and "cached_tokens" in payload.func:
        rate = payload.kwargs.get("min_avg_kv_hit_rate")
        return float(rate) if isinstance(rate, int | float) and rate else None
    return None


def tests_in(path: Path, stack: str, source: str) -> list[UpstreamTest]:
    """Every id one profile file generates, with its literal facts."""
    tests = []
    for profile in _profiles(path):
        short = _field(profile, "short_name", str(path), str)
        model = profile.kwargs.get("name")
        topologies = _field(profile, "topologies", f"{path} ({short})", dict)
        profile_marks = profile.kwargs.get("marks", [])
        for topology, config in topologies.items():
            where = f"{path} ({short}, {topology})"
            if not isinstance(config, Call):
                raise UnreadableCheckout(f"{where}: the topology is not a TopologyConfig(...)")
            gpu = config.kwargs.get("gpu_marker") or profile.kwargs.get("gpu_marker")
            gpu = gpu if isinstance(gpu, str) else DEFAULT_GPU_MARKER
            for case in config.kwargs.get("tests", []):
                if not isinstance(case, Call):
                    raise UnreadableCheckout(f"{where}: a test is not an MmCase(...)")
                suffix = case.kwargs.get("suffix")
                key = f"mm_{topology}_{short}" + (f"_{suffix}" if suffix else "")
                marks = case.kwargs.get("marks") or config.kwargs.get("marks", [])
                every = [*_mark_names(marks), *_mark_names(profile_marks)]
                cadence = next((m for m in every if m in CADENCES), "unmarked")
                skipped = _skip_reason(marks) or _skip_reason(profile_marks)
                followups = case.kwargs.get("followup_payloads") or []
                tests.append(
                    UpstreamTest(
                        id=key,
                        cadence=cadence,
                        gpus=int(gpu.removeprefix("gpu_") or 1),
                        absent=f"skipped upstream ({skipped})" if skipped else None,
                        source=source,
                        stack=stack,
                        model=model if isinstance(model, str) else None,
                        min_avg_kv_hit_rate=_hit_rate(case.kwargs.get("payload")),
                        followups=len(followups) if isinstance(followups, list) else 0,
                    )
                )
    return tests


def checkout_revision(src: Path) -> str:
    """The checkout's commit, or "(not a git checkout)"."""
    done = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "--short=8", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else "(not a git checkout)"


def read_checkout(src: Path, catalogue: list[UpstreamTest]) -> tuple[list[UpstreamTest], str]:
    """The ids the checkout's profile files generate, each joined with the catalogue entry of
    the same id and stack for what the file cannot say (`absent`, `here`, `model_differs`),
    and the source line naming the checkout. Raises UnreadableCheckout naming the file."""
    files = {stack: src / rel for stack, rel in PROFILE_FILES.items() if (src / rel).is_file()}
    if not files:
        wanted = " or ".join(PROFILE_FILES.values())
        raise UnreadableCheckout(f"{src}: no {wanted} (is it a Dynamo checkout?)")
    source = "checkout"
    known = {(t.stack, t.id): t for t in catalogue}
    read = []
    for stack, path in files.items():
        for test in tests_in(path, stack, source):
            entry = known.get((stack, test.id))
            if entry is not None:
                test = dataclasses.replace(
                    test,
                    absent=test.absent or entry.absent,
                    here=entry.here,
                    model_differs=entry.model_differs,
                )
            read.append(test)
    where = ", ".join(str(p.relative_to(src)) for p in files.values())
    return read, f"{where} at {src} {checkout_revision(src)}"
