"""A Dynamo checkout's own multimodal serve matrix, read from its test files (parsed, never
imported: they import Dynamo, pytest plugins and GPU probes). The checkout is the map: which
script each upstream id runs, with which arguments, env, model, marks and payload facts.

Files read (paths in upstream's layout, `MATRIX_FILES`):

- `tests/serve/multimodal_profiles/{vllm,vllm_xpu,sglang}.py`: a module-level `*_PROFILES` list of
  `MultimodalModelProfile(name, short_name, topologies={key: TopologyConfig(...tests=[MmCase])})`
  and a `*_TOPOLOGY_SCRIPTS` dict from topology key to script. The id is upstream's generator's
  (`tests/utils/multimodal.py make_multimodal_configs`): `mm_{topology}_{short_name}[_{suffix}]`,
  the script `<directory>/launch/<scripts[topology]>`, the args `--model NAME` + the profile's
  `extra_vllm_args` + `--single-gpu`/`--two-gpu` + the case's `extra_script_args`.
- `tests/serve/test_{sglang,trtllm}.py`: a module-level `*_configs` dict of
  `SGLangConfig(name, directory, script_name, script_args, marks, model, env, timeout, ...)` whose
  marks include `pytest.mark.multimodal` (diffusion configs, which generate media, are left out).

A file that is there but not in a shape this reader knows is named with file and line
(`UnreadableCheckout`); it is never skipped in silence."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# file -> (stack, accelerator, the launch directory its configs use, relative to the checkout)
MATRIX_FILES: dict[str, tuple[str, str, str]] = {
    "tests/serve/multimodal_profiles/vllm.py": ("dynamo-vllm", "cuda", "examples/backends/vllm"),
    "tests/serve/multimodal_profiles/vllm_xpu.py": (
        "dynamo-vllm",
        "xpu",
        "examples/backends/vllm",
    ),
    "tests/serve/multimodal_profiles/sglang.py": (
        "dynamo-sglang",
        "cuda",
        "examples/backends/sglang",
    ),
    "tests/serve/test_sglang.py": ("dynamo-sglang", "cuda", "examples/backends/sglang"),
    "tests/serve/test_trtllm.py": ("dynamo-trtllm", "cuda", "examples/backends/trtllm"),
}
# Where a config's `directory` is a name the file computes (sglang_dir, vllm_dir, SERVE_TEST_DIR):
# the upstream defaults those names stand for (tests/serve/test_*.py, `os.environ.get(...) or
# os.path.join(WORKSPACE_DIR, ...)`).
DIRECTORY_NAMES = {
    "SERVE_TEST_DIR": "tests/serve",
    "vllm_dir": "examples/backends/vllm",
    "sglang_dir": "examples/backends/sglang",
    "trtllm_dir": "examples/backends/trtllm",
}
CADENCES = ("pre_merge", "post_merge", "nightly")
DEFAULT_GPU_MARKER = "gpu_1"  # MultimodalModelProfile.gpu_marker's default upstream
DEFAULT_HEALTH_WORKERS = 2  # EngineConfig.health_check_worker_count's default upstream
MODEL_FLAGS = ("--model", "--model-path")


class UnreadableCheckout(ValueError):
    """A checkout whose matrix files cannot be read as upstream's structure (names the file)."""


@dataclass(frozen=True)
class Call:
    """A call in the file, kept as data: `MmCase(suffix="b64", ...)` -> Call("MmCase", ...)."""

    func: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    line: int = 0


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
                if k is not None  # a `**spread`: the names it merges are read on their own
            }
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.value(self.names[node.id], depth + 1)
            return Opaque(node.id)
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
                node.lineno,
            )
        if isinstance(node, ast.BinOp | ast.UnaryOp):
            try:
                return ast.literal_eval(node)
            except ValueError:
                pass
        return Opaque(ast.get_source_segment(self.text, node) or "")


@dataclass(frozen=True)
class Payload:
    """What one request of an upstream id checks, as its factory call says literally."""

    kind: str  # the factory: make_image_payload, chat_payload, ...
    expected: tuple[str, ...] = ()
    expected_log: tuple[str, ...] = ()
    repeat: int | None = None  # its repeat_count; None: the factory's own default
    min_avg_kv_hit_rate: float | None = None
    prompt_filler_repeats: int | None = None
    options: tuple[str, ...] = ()  # every keyword the call gives, known to this reader or not
    line: int = 0
    eviction_fill_count: int | None = None
    max_tokens: int | None = None
    min_cached_tokens: int | None = None
    set_options: tuple[str, ...] = ()  # the keywords given a true value (a flag set, a count > 0)


@dataclass(frozen=True)
class MatrixEntry:
    """One upstream id as the checkout's test files define it."""

    id: str
    stack: str
    accelerator: str  # cuda | xpu
    file: str  # relative to the checkout
    line: int
    script: str  # relative to the checkout
    topology: str | None  # the file's topology key (None: a config named by id only)
    script_args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # literal values only
    model: str | None = None
    cadence: str = "unmarked"
    gpu_marker: str = DEFAULT_GPU_MARKER
    timeout_s: int | None = None
    health_check_workers: int = 0  # worker /health ports polled (0: none)
    payloads: tuple[Payload, ...] = ()
    skip: str | None = None  # an unconditional pytest.mark.skip's reason

    @property
    def gpus(self) -> int:
        digits = self.gpu_marker.rsplit("_", 1)[-1]
        return int(digits) if digits.isdigit() else 1

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def model_flag(self) -> str:
        """The flag its launcher takes the model by (`--model`, or SGLang's `--model-path`)."""
        return next((a for a in self.script_args if a in MODEL_FLAGS), "--model")

    @property
    def extra_args(self) -> tuple[str, ...]:
        """Its script args without the model and the GPU layout flag."""
        out: list[str] = []
        skip = False
        for arg in self.script_args:
            if skip:
                skip = False
            elif arg in MODEL_FLAGS:
                skip = True
            elif arg not in ("--single-gpu", "--two-gpu"):
                out.append(arg)
        return tuple(out)


def _mark_names(marks: Any) -> list[str]:
    """`pytest.mark.post_merge` -> "post_merge"; a mark call by its name."""
    names = []
    for mark in marks if isinstance(marks, list) else []:
        dotted = mark.func if isinstance(mark, Call) else mark
        if isinstance(dotted, str) and dotted.startswith("pytest.mark."):
            names.append(dotted.removeprefix("pytest.mark."))
    return names


def _mark_call(marks: Any, name: str) -> Call | None:
    for mark in marks if isinstance(marks, list) else []:
        if isinstance(mark, Call) and mark.func == f"pytest.mark.{name}":
            return mark
    return None


def _skip_reason(marks: Any) -> str | None:
    mark = _mark_call(marks, "skip")
    if mark is None:
        return None
    reason = mark.kwargs.get("reason", mark.args[0] if mark.args else "")
    return reason if isinstance(reason, str) and reason else "skipped upstream"


def _gpu_marker(names: list[str]) -> str | None:
    return next((n for n in names if re.fullmatch(r"(gpu|xpu)_\d+", n)), None)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _payload(value: Any) -> Payload | None:
    if not isinstance(value, Call):
        return None
    kw = value.kwargs
    expected = kw.get("expected_response", value.args[0] if value.args else None)
    rate = kw.get("min_avg_kv_hit_rate")
    filler = kw.get("prompt_filler_repeats")
    repeat = kw.get("repeat_count")
    fills = kw.get("eviction_fill_count")
    max_tokens = kw.get("max_tokens")
    cached = kw.get("min_cached_tokens")
    return Payload(
        kind=value.func.rsplit(".", 1)[-1],
        expected=_strings(expected),
        expected_log=_strings(kw.get("expected_log")),
        repeat=repeat if isinstance(repeat, int) else None,
        min_avg_kv_hit_rate=float(rate) if isinstance(rate, int | float) and rate else None,
        prompt_filler_repeats=filler if isinstance(filler, int) else None,
        options=tuple(sorted(kw)),
        line=value.line,
        eviction_fill_count=fills if isinstance(fills, int) else None,
        min_cached_tokens=cached if isinstance(cached, int) else None,
        set_options=tuple(sorted(k for k, v in kw.items() if v not in (None, False, 0, "", []))),
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )


def _payloads(values: Any) -> tuple[Payload, ...]:
    items = values if isinstance(values, list) else [values]
    return tuple(p for v in items if (p := _payload(v)) is not None)


def _literal_env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _directory(value: Any, default: str) -> str:
    """A config's launch directory relative to the checkout: a name the file computes (sglang_dir)
    by the upstream default it stands for, `os.path.join(WORKSPACE_DIR, "x")` as "x"."""
    if isinstance(value, Opaque) and value.source in DIRECTORY_NAMES:
        return DIRECTORY_NAMES[value.source]
    if isinstance(value, Call) and value.func.endswith("path.join") and len(value.args) == 2:
        tail = value.args[1]
        if isinstance(tail, str):
            return tail.strip("/")
    if isinstance(value, str):
        return value.removeprefix("/workspace/").strip("/")
    return default


def _parse(path: Path) -> _Reader:
    text = path.read_text()
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise UnreadableCheckout(f"{path}: not Python ({exc.msg}, line {exc.lineno})") from None
    return _Reader(tree, text)


def _named(reader: _Reader, suffix: str) -> list[tuple[str, Any]]:
    return [(n, reader.value(v)) for n, v in reader.names.items() if n.endswith(suffix)]


@dataclass(frozen=True)
class TopologyScript:
    """One `*_TOPOLOGY_SCRIPTS` entry: the script a profile file runs a topology on."""

    stack: str
    accelerator: str
    topology: str
    script: str  # relative to the checkout
    where: str  # file:line of the map


def _topology_scripts(
    reader: _Reader, rel: str, stack: str, accelerator: str, directory: str
) -> list[TopologyScript]:
    found = []
    for name, node in reader.names.items():
        value = reader.value(node)
        if name.endswith("_TOPOLOGY_SCRIPTS") and isinstance(value, dict):
            found += [
                TopologyScript(
                    stack, accelerator, k, f"{directory}/launch/{v}", f"{rel}:{node.lineno}"
                )
                for k, v in value.items()
                if isinstance(k, str) and isinstance(v, str)
            ]
    return found


def _health_workers(kwargs: dict[str, Any]) -> int:
    """The worker /health ports a config polls (`health_check_workers`, its count): 0 for none."""
    count = kwargs.get("health_check_worker_count", DEFAULT_HEALTH_WORKERS)
    polled = kwargs.get("health_check_workers") is True and isinstance(count, int)
    return count if polled else 0


def _profile_entries(
    reader: _Reader, rel: str, stack: str, accelerator: str, directory: str
) -> list[MatrixEntry]:
    """Every id one multimodal_profiles/*.py file generates, as upstream's generator makes it."""
    profiles: list[Call] = []
    for _, value in _named(reader, "_PROFILES"):
        for item in value if isinstance(value, list) else []:
            if isinstance(item, Call) and item.func.endswith("MultimodalModelProfile"):
                profiles.append(item)
    if not profiles:
        raise UnreadableCheckout(
            f"{rel}: no MultimodalModelProfile(...) in a module-level *_PROFILES list"
        )
    scripts = {
        mapped.topology: mapped.script.removeprefix(f"{directory}/launch/")
        for mapped in _topology_scripts(reader, rel, stack, accelerator, directory)
    }
    entries = []
    for profile in profiles:
        where = f"{rel}:{profile.line}"
        short = profile.kwargs.get("short_name")
        if not isinstance(short, str):
            raise UnreadableCheckout(f"{where}: MultimodalModelProfile.short_name is not literal")
        model = profile.kwargs.get("name")
        model = model if isinstance(model, str) else None
        topologies = profile.kwargs.get("topologies")
        if not isinstance(topologies, dict):
            raise UnreadableCheckout(f"{where} ({short}): topologies is not a literal dict")
        profile_marks = profile.kwargs.get("marks", [])
        extra_vllm = list(_strings(profile.kwargs.get("extra_vllm_args")))
        for topology, config in topologies.items():
            if not isinstance(config, Call):
                raise UnreadableCheckout(
                    f"{rel}:{profile.line} ({short}, {topology}): not a TopologyConfig(...)"
                )
            if topology not in scripts:
                raise UnreadableCheckout(
                    f"{rel}:{config.line} ({short}, {topology}): no script for topology "
                    f"{topology!r} in the file's *_TOPOLOGY_SCRIPTS"
                )
            kw = config.kwargs
            gpu = kw.get("gpu_marker") or profile.kwargs.get("gpu_marker")
            gpu = gpu if isinstance(gpu, str) else DEFAULT_GPU_MARKER
            layout = ["--single-gpu"] if kw.get("single_gpu") is True else []
            layout += ["--two-gpu"] if kw.get("two_gpu") is True else []
            base_args = ["--model", model or "", *extra_vllm, *layout]
            launch_dir = _directory(kw.get("directory"), directory)
            for case in kw.get("tests", []) or []:
                if not isinstance(case, Call):
                    raise UnreadableCheckout(
                        f"{rel}:{config.line} ({short}, {topology}): a test is not an MmCase(...)"
                    )
                suffix = case.kwargs.get("suffix")
                key = f"mm_{topology}_{short}" + (f"_{suffix}" if suffix else "")
                marks = case.kwargs.get("marks") or kw.get("marks", [])
                every = [*_mark_names(marks), *_mark_names(profile_marks)]
                timeout = case.kwargs.get("timeout_s") or kw.get("timeout_s")
                followups = case.kwargs.get("followup_payloads") or []
                entries.append(
                    MatrixEntry(
                        id=key,
                        stack=stack,
                        accelerator=accelerator,
                        file=rel,
                        line=case.line,
                        script=f"{launch_dir}/launch/{scripts[topology]}",
                        topology=topology,
                        script_args=(*base_args, *_strings(case.kwargs.get("extra_script_args"))),
                        env={**_literal_env(kw.get("env")), **_literal_env(case.kwargs.get("env"))},
                        model=model,
                        cadence=next((m for m in every if m in CADENCES), "unmarked"),
                        gpu_marker=gpu,
                        timeout_s=timeout if isinstance(timeout, int) else None,
                        health_check_workers=_health_workers(kw),
                        payloads=_payloads([case.kwargs.get("payload"), *followups]),
                        skip=_skip_reason(marks) or _skip_reason(profile_marks),
                    )
                )
    return entries


def _config_entries(
    reader: _Reader, rel: str, stack: str, accelerator: str, directory: str
) -> list[MatrixEntry]:
    """The multimodal EngineConfigs of a tests/serve/test_*.py file (its `*_configs` dicts)."""
    entries = []
    for name, value in _named(reader, "_configs"):
        if not isinstance(value, dict):
            continue
        for key, config in value.items():
            if not isinstance(config, Call) or not isinstance(key, str):
                continue
            kw = config.kwargs
            marks = kw.get("marks", [])
            names = _mark_names(marks)
            if "multimodal" not in names or "diffusion" in str(kw.get("script_name", "")):
                continue
            where = f"{rel}:{config.line} ({name}[{key!r}])"
            script = kw.get("script_name")
            if not isinstance(script, str):
                raise UnreadableCheckout(f"{where}: script_name is not a literal string")
            model = kw.get("model")
            timeout_mark = _mark_call(marks, "timeout")
            timeout = timeout_mark.args[0] if timeout_mark and timeout_mark.args else None
            timeout = timeout if isinstance(timeout, int) else kw.get("timeout")
            entries.append(
                MatrixEntry(
                    id=given if isinstance(given := kw.get("name"), str) else key,
                    stack=stack,
                    accelerator=accelerator,
                    file=rel,
                    line=config.line,
                    script=f"{_directory(kw.get('directory'), directory)}/launch/{script}",
                    topology=None,
                    script_args=_strings(kw.get("script_args")),
                    env=_literal_env(kw.get("env")),
                    model=model if isinstance(model, str) else None,
                    cadence=next((m for m in names if m in CADENCES), "unmarked"),
                    gpu_marker=_gpu_marker(names) or DEFAULT_GPU_MARKER,
                    timeout_s=timeout if isinstance(timeout, int) else None,
                    health_check_workers=_health_workers(kw),
                    payloads=_payloads(kw.get("request_payloads")),
                    skip=_skip_reason(marks),
                )
            )
    return entries


@dataclass(frozen=True)
class Matrix:
    """Every multimodal id of a checkout, and the files they were read from."""

    root: Path
    entries: tuple[MatrixEntry, ...]
    files: tuple[str, ...]
    scripts: tuple[TopologyScript, ...] = ()

    def of(self, stack: str, accelerator: str = "cuda") -> list[MatrixEntry]:
        return [e for e in self.entries if e.stack == stack and e.accelerator == accelerator]

    def entry(self, stack: str, accelerator: str, upstream_id: str) -> MatrixEntry | None:
        return next((e for e in self.of(stack, accelerator) if e.id == upstream_id), None)

    def for_topology(self, stack: str, accelerator: str, topology: str) -> TopologyScript | None:
        """The script the matrix runs `topology` on for this stack: a profile file's
        `*_TOPOLOGY_SCRIPTS` entry, else the config whose id names it (`multimodal_agg_fd_qwen`,
        `video_e_pd_qwen`: `{kind}_{topology}_…`)."""
        for mapped in self.scripts:
            if (mapped.stack, mapped.accelerator, mapped.topology) == (
                stack,
                accelerator,
                topology,
            ):
                return mapped
        for entry in self.of(stack, accelerator):
            if entry.topology is None and id_topology(entry.id) == topology:
                return TopologyScript(stack, accelerator, topology, entry.script, entry.where)
        return None

    @property
    def where(self) -> str:
        return f"{', '.join(self.files)} at {self.root} {checkout_revision(self.root)}"


TOPOLOGY_WORDS = ("agg_router", "agg", "e_pd", "epd", "p_d", "pd")  # longest first


def id_topology(upstream_id: str) -> str | None:
    """The topology an EngineConfig's id names after its kind: `multimodal_e_pd_qwen` -> e_pd.

    >>> [id_topology(i) for i in ("multimodal_agg_fd_qwen", "video_e_pd_qwen", "multimodal_x")]
    ['agg', 'e_pd', None]
    """
    rest = upstream_id.split("_", 1)[1] if "_" in upstream_id else ""
    return next((t for t in TOPOLOGY_WORDS if rest == t or rest.startswith(f"{t}_")), None)


def read_matrix(src: Path) -> Matrix:
    """The checkout's matrix. Raises UnreadableCheckout naming the file (none there: names the
    files looked for)."""
    entries: list[MatrixEntry] = []
    scripts: list[TopologyScript] = []
    files = []
    for rel, (stack, accelerator, directory) in MATRIX_FILES.items():
        path = src / rel
        if not path.is_file():
            continue
        files.append(rel)
        reader = _parse(path)
        if "multimodal_profiles" in rel:
            entries += _profile_entries(reader, rel, stack, accelerator, directory)
            scripts += _topology_scripts(reader, rel, stack, accelerator, directory)
        else:
            entries += _config_entries(reader, rel, stack, accelerator, directory)
    if not src.is_dir():
        raise UnreadableCheckout(f"{src}: no such directory")
    if not files:
        raise UnreadableCheckout(
            f"{src}: none of {', '.join(MATRIX_FILES)} (is it a Dynamo checkout?)"
        )
    return Matrix(src, tuple(entries), tuple(files), tuple(scripts))


@functools.lru_cache(maxsize=8)
def matrix_at(src: Path) -> Matrix | None:
    """The checkout's matrix, read once per process; None where it carries none of the files."""
    if not any((src / rel).is_file() for rel in MATRIX_FILES):
        return None
    return read_matrix(src)


def checkout_revision(src: Path) -> str:
    """The checkout's commit, or "(not a git checkout)"."""
    done = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "--short=8", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else "(not a git checkout)"
