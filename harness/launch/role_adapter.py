"""The one place a role's command line and environment meet the tier: it stands in for `python`
between every launcher (ours and a Dynamo checkout's, run unmodified) and the engine. Run as a
script, stdlib only: it is every role's first process. Each `python -m dynamo.<component> ...`
a launcher starts comes here first, which

- names the role: `HARNESS_ROLE` (our launchers' `start_role` sets it), else `dynamo.frontend`
  is the frontend and a worker is the role whose health-port variable holds the DYN_SYSTEM_PORT
  it was given (HARNESS_ROLE_PORTS, from the profile);
- holds it to the profile's model: a worker that starts another model (or none, the engine's
  default) is refused, naming role, model and profile: never a silent swap, on either tier;
- gives a checkout's role the launcher contract our `start_role` gives ours: NAME.pid, NAME.log;
- maps it to the tier:
  - every tier: `tcp://*` KV-event publishers of vLLM moved to ipc:// sockets (loopback), the
    frontend given NIXL's C library on its loader path (it decodes media with it), the role's
    GPU position (`CUDA_VISIBLE_DEVICES=<i>` as upstream's launchers write it) turned into the
    device the harness leased for it (HARNESS_LEASED_GPUS);
  - CPU: the tiny checkpoint for `--model` / `--model-path`, the CPU engine flags for the
    GPU-only ones (vLLM: launchers/lib/cpu_engine_args; SGLang: CPU_SGLANG_ARGS, run by the
    CPU tier's SGLang venv), NIXL on CPU buffers, media embeddings through files, the engines'
    CPU environment, the frontend's KV block size;
  - GPU with a memory plan: each role's planned bytes (HARNESS_KV_BYTES_<ROLE> and friends,
    harness/machine/memory_plan.py) for the launcher's own fractions;
  - XPU: the role's device as ZE_AFFINITY_MASK, eager, 64-token blocks;
- refuses, naming the flag and the role, anything it cannot map (NAME.refused; the harness fails
  `launcher_invalid`). Every decision is written to NAME.adapter.json (`harness audit` reads it);
- then execs the real interpreter. Anything else (`python -c …`, `python3 script.py`) runs as is."""

from __future__ import annotations

import glob
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

# run as a script (every role's first process): the repository's packages, by path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.core.role_contract import (
    ADAPTER_RECORD,
    CONTRACT_ENV,
    CPU_DTYPE_ENV,
    CPU_MAX_MODEL_LEN_ENV,
    CPU_MODEL_ENV,
    DEVICE_ENV,
    DRY_ENV,
    FRONTEND_PORT_ENV,
    LEASED_GPUS_ENV,
    LEASED_PORTS_ENV,
    LOG_DIR_ENV,
    NIXL_LEASED,
    NIXL_PORT_ENV,
    NO_PORT_SUFFIX,
    PROFILE_ENV,
    PROFILE_MODEL_ENV,
    REAL_PYTHON_ENV,
    REFUSED_RECORD,
    ROLE_ENV,
    ROLE_PORTS_ENV,
    SGLANG_NCCL_LEASED,
    SGLANG_PYTHON_ENV,
    STACK_ENV,
    SYSTEM_PORT_ENV,
    TAPPED_ROLE_ENV,
    adapter_record,
    is_secret,
    role_key,
    written,
)
from harness.launch.role_flags import (
    CPU_ARGS_FILE,
    CPU_KV_BLOCK,
    CPU_SGLANG_ARGS,
    CPU_SGLANG_ENV,
    CPU_VLLM_ENV,
    EMBEDDING_TRANSFER,
    ENCODE_WORKER_SWITCH,
    KEEP_SWITCHES,
    KEEP_VALUED,
    KV_TRANSFER_BACKEND,
    MODEL_FLAG,
    NIXL_PTHR_DELAY,
    PORT_FLAGS,
    REPLACED_SWITCHES,
    REPLACED_VALUED,
    RETRACTION,
    SGLANG_GPU_MEMORY_SWITCHES,
    SGLANG_KEEP_SWITCHES,
    SGLANG_KEEP_VALUED,
    SGLANG_PLANNED,
    SGLANG_REPLACED_SWITCHES,
    SGLANG_REPLACED_VALUED,
    SGLANG_SLEEP_ON_IDLE,
    SGLANG_TRANSFER_ENV,
    SWITCHES,
    VLLM_ENCODER_PLANNED,
    VLLM_PLANNED,
    XPU_ENV_ON_CPU,
)


class Refused(Exception):
    """A command line that does not run; the message names the flag, the model or the port
    (`port`: one the role would bind that nobody leased, for the harness to name its holder).
    `fault`: "tier" where the tier cannot reproduce what the launcher asks (a flag with no CPU
    mapping), "launcher" where the launcher does something wrong on any tier (another model, a
    worker with no system port or with another role's); `role`: the role, where the command line
    says it and the ports do not."""

    def __init__(
        self,
        message: str,
        port: int | None = None,
        fault: str = "tier",
        role: str | None = None,
    ) -> None:
        super().__init__(message)
        self.port = port
        self.fault = fault
        self.role = role


@dataclass
class Adapted:
    role: str | None
    argv: list[str]
    python: str | None = None  # another interpreter than HARNESS_REAL_PYTHON runs the role
    env: dict[str, str] = field(default_factory=dict)  # set in the role's environment
    unset: list[str] = field(default_factory=list)  # removed from it
    notes: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)  # what it binds, by where it came from
    # a worker its command line names but started with no system port: it runs (its answers are
    # still judged), and this launcher fault fails the case afterwards (NAME.noport)
    no_port: str | None = None


def compact(config: object) -> str:
    """JSON as launchers write it (no spaces)."""
    return json.dumps(config, separators=(",", ":"))


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def split_args(args: list[str]) -> list[tuple[str, str | None]]:
    """[(flag, value or None)] in order; a value given as `--x=v` or as the next word."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise Refused(f"positional argument {arg!r}")
        name = flag_name(arg)
        if "=" in arg:
            out.append((name, arg.split("=", 1)[1]))
        elif name in KEEP_SWITCHES or name in REPLACED_SWITCHES or name in SWITCHES:
            out.append((name, None))
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((name, args[i + 1]))
            i += 1
        else:
            out.append((name, None))
        i += 1
    return out


def join_args(pairs: list[tuple[str, str | None]]) -> list[str]:
    return [word for name, value in pairs for word in ([name] if value is None else [name, value])]


def kv_events_endpoint(endpoint: str) -> str:
    """tcp://*:P and tcp://0.0.0.0:P -> an ipc:// socket in the role's TMPDIR (the topology's
    scratch). Not tcp://127.0.0.1:P: vLLM 0.31's ZmqEventPublisher binds only wildcard and ipc://
    endpoints and connects to any other (distributed/kv_events.py `_is_bind_endpoint`), and
    dynamo.vllm's reader connects too, so no KV event would flow and the KV router would route
    blind (router_kv_hit_rate 0: design-deviations.md at 7310361, "KV router and cache hits"). A
    socket file listens on no network."""
    for host in ("tcp://*:", "tcp://0.0.0.0:"):
        if endpoint.startswith(host):
            tmp = os.environ.get("TMPDIR", "/tmp")
            return f"ipc://{tmp}/kv-events-{endpoint[len(host) :]}"
    return endpoint


def kv_events_args(pairs: list[tuple[str, str | None]], out: Adapted) -> None:
    """vLLM's KV-event publishers on loopback (kv_events_endpoint), in place."""
    for i, (name, value) in enumerate(pairs):
        if name != "--kv-events-config":
            continue
        config = json.loads(value or "{}")
        endpoint = config.get("endpoint", "")
        config["endpoint"] = kv_events_endpoint(endpoint)
        if config["endpoint"] != endpoint:
            out.notes.append(f"{name}: endpoint {endpoint} -> {config['endpoint']}")
            pairs[i] = (name, compact(config))


def check_model(module: str, pairs: list[tuple[str, str | None]], env: dict[str, str]) -> None:
    """A worker serves the profile's model, by the flag its engine reads."""
    flag = MODEL_FLAG.get(module)
    wanted = env.get(PROFILE_MODEL_ENV)
    if flag is None or not wanted:
        return
    given = [value for name, value in pairs if name == flag]
    model = given[-1] if given else None
    if model != wanted:
        started = f"model {model!r}" if model else f"no {flag} (the engine's default model)"
        raise Refused(
            f"starts {started}, not {wanted!r}, the model of profile "
            f"{env.get(PROFILE_ENV, '?')}: a launcher is invoked with `--model {wanted}` (as "
            "upstream's tests invoke it); one that starts another model would be judged against "
            "the wrong model's answers",
            fault="launcher",
        )


def served_name(kept: list[tuple[str, str | None]], served: str, out: Adapted) -> set[str]:
    """The profile's model name served where the launcher names none (the tiny checkpoint's
    path would be the name otherwise); the flags kept, by name."""
    names = {name for name, _ in kept}
    if "--served-model-name" not in names and served:
        kept.append(("--served-model-name", served))
        out.notes.append(f"added --served-model-name {served}")
    return names


def cpu_vllm_args(
    pairs: list[tuple[str, str | None]], env: dict[str, str], out: Adapted
) -> list[str]:
    """A dynamo.vllm worker's flags on the CPU tier."""
    model_dir, served = env[CPU_MODEL_ENV], env.get(PROFILE_MODEL_ENV, "")
    kept: list[tuple[str, str | None]] = []
    for name, value in pairs:
        if name == "--model":
            kept.append(("--model", model_dir))
            out.notes.append(f"--model {value} -> the tiny checkpoint {model_dir}")
        elif name in REPLACED_VALUED or name in REPLACED_SWITCHES:
            out.notes.append(
                f"dropped {name}{'' if value is None else ' ' + value} (GPU sizing; "
                "the CPU tier's own flags replace it)"
            )
        elif name == "--kv-transfer-config":
            config = json.loads(value or "{}")
            if config.get("kv_connector") != "NixlConnector":
                raise Refused(
                    f"{name} with connector {config.get('kv_connector')!r} (the CPU "
                    "tier runs NixlConnector on CPU buffers only)"
                )
            if config.get("kv_buffer_device") != "cpu":
                config["kv_buffer_device"] = "cpu"
                out.notes.append(f"{name}: kv_buffer_device -> cpu")
            kept.append((name, compact(config)))
        elif (
            name == "--kv-events-config"
            or (name in KEEP_SWITCHES and value is None)
            or (name in KEEP_VALUED and value is not None)
        ):
            kept.append((name, value))
        else:
            raise Refused(f"{name}{'' if value is None else ' ' + value}")
    names = served_name(kept, served, out)
    cpu = with_dtype(shlex.split(CPU_ARGS_FILE.read_text().split("\n#", 1)[0]), env)
    cpu += ["--kv-cache-memory-bytes", env.get("HARNESS_CPU_KV_BYTES", "64M")]
    out.notes.append(f"added the CPU tier's engine flags: {' '.join(cpu)}")
    mode = dict(kept).get("--disaggregation-mode")
    args = join_args(kept) + cpu
    if EMBEDDING_TRANSFER not in names and ("--route-to-encoder" in names or mode == "encode"):
        args += [EMBEDDING_TRANSFER, "local"]
        out.notes.append(f"added {EMBEDDING_TRANSFER} local (nixl-write pre-allocates 8 GiB)")
    out.env.update(CPU_VLLM_ENV)
    out.env.setdefault(NIXL_PTHR_DELAY[0], env.get(NIXL_PTHR_DELAY[0], NIXL_PTHR_DELAY[1]))
    out.unset.append("CUDA_VISIBLE_DEVICES")
    device_env_on_cpu(env, out)
    return args


def with_value(args: list[str], flag: str, value: str | None) -> list[str]:
    """`args` with `flag`'s value replaced by `value` (unchanged where either is absent)."""
    if not value or flag not in args:
        return args
    at = args.index(flag) + 1
    return [*args[:at], value, *args[at + 1 :]]


def with_dtype(args: list[str], env: dict[str, str]) -> list[str]:
    """The CPU tier's engine flags with `--dtype` the checkpoint's (CPU_DTYPE_ENV; unset: the
    float32 the flags name) and a profile's longer context (CPU_MAX_MODEL_LEN_ENV)."""
    args = with_value(args, "--dtype", env.get(CPU_DTYPE_ENV))
    longer = env.get(CPU_MAX_MODEL_LEN_ENV)
    return with_value(with_value(args, "--max-model-len", longer), "--context-length", longer)


def device_env_on_cpu(env: dict[str, str], out: Adapted) -> None:
    """An XPU launcher's device choice, removed on the CPU tier (XPU_ENV_ON_CPU)."""
    for name, why in XPU_ENV_ON_CPU.items():
        if name in env:
            out.unset.append(name)
            out.notes.append(f"unset {name}={env[name]} ({why})")


def cpu_sglang_args(
    pairs: list[tuple[str, str | None]], env: dict[str, str], out: Adapted
) -> list[str]:
    """A dynamo.sglang worker's flags and interpreter on the CPU tier: aggregated, E/PD (an
    encode worker handing embeddings to an aggregated worker, through files) and prefill/decode
    (KV through NIXL on host memory)."""
    python = env.get(SGLANG_PYTHON_ENV)
    if not python or not Path(python).exists():
        raise Refused(
            f"-m dynamo.sglang: the CPU tier's SGLang venv is not installed ({SGLANG_PYTHON_ENV}="
            f"{python or 'unset'}); scripts/bootstrap.sh builds it"
        )
    out.python = python
    model_dir, served = env[CPU_MODEL_ENV], env.get(PROFILE_MODEL_ENV, "")
    kept: list[tuple[str, str | None]] = []
    backend: str | None = None
    for name, value in pairs:
        if name == "--model-path":
            kept.append((name, model_dir))
            out.notes.append(f"--model-path {value} -> the tiny checkpoint {model_dir}")
        elif name == KV_TRANSFER_BACKEND:
            backend = value
        elif name in SGLANG_GPU_MEMORY_SWITCHES and value is None:
            out.notes.append(f"dropped {name} ({SGLANG_GPU_MEMORY_SWITCHES[name]})")
        elif name in SGLANG_REPLACED_VALUED or name in SGLANG_REPLACED_SWITCHES:
            out.notes.append(
                f"dropped {name}{'' if value is None else ' ' + value} (GPU sizing or a GPU-only "
                "choice; the CPU tier's own flags replace it)"
            )
        elif (name in SGLANG_KEEP_SWITCHES and value is None) or (
            name in SGLANG_KEEP_VALUED and value is not None
        ):
            kept.append((name, value))
        else:
            raise Refused(f"{name}{'' if value is None else ' ' + value}")
    served_name(kept, served, out)
    if dict(kept).get("--disaggregation-mode") in ("prefill", "decode"):
        # KV moves prefill -> decode: NIXL over host memory (UCX), as the CPU tier's vLLM P/D;
        # SGLang's NIXL connector registers its KV as host memory there (scripts/apply_shims.py)
        kept.append((KV_TRANSFER_BACKEND, "nixl"))
        if dict(kept).get("--disaggregation-mode") == "decode" and RETRACTION not in dict(kept):
            # its default backup pool is pinned with cudaHostRegister (mem_cache/pool_host/
            # common.py _cuda_host_register): "Torch not compiled with CUDA enabled"
            kept.append((RETRACTION, "cpu_tensor"))
            out.notes.append(f"added {RETRACTION} cpu_tensor (the host pool pins through CUDA)")
        out.env.setdefault(NIXL_PTHR_DELAY[0], env.get(NIXL_PTHR_DELAY[0], NIXL_PTHR_DELAY[1]))
        if backend not in (None, "nixl"):
            out.notes.append(f"{KV_TRANSFER_BACKEND} {backend} -> nixl (host memory over UCX)")
    elif backend is not None:
        out.notes.append(f"dropped {KV_TRANSFER_BACKEND} {backend} (no KV moves between roles)")
    for i, (name, value) in enumerate(kept):
        if name == EMBEDDING_TRANSFER and value != "local":
            kept[i] = (name, "local")
            out.notes.append(f"{name} {value} -> local (embeddings through files: no NIXL VRAM)")
    # Dynamo's SGLang E/PD moves embeddings by NIXL unless told otherwise (the flag, or the
    # variable behind it); NIXL cannot register the receiver's CPU tensors (RdmaMetadata
    # fails to validate in embedding_transfer.py receive_embeddings), so every role is told.
    if environ_mode := env.get(SGLANG_TRANSFER_ENV):
        if environ_mode != "local":
            out.notes.append(f"{SGLANG_TRANSFER_ENV}={environ_mode} -> local")
    else:
        out.notes.append(f"{SGLANG_TRANSFER_ENV}=local (the launcher sets no transfer mode)")
    out.env[SGLANG_TRANSFER_ENV] = "local"
    cpu_args = with_dtype(CPU_SGLANG_ARGS, env) + (
        ["--sleep-on-idle"] if env.get(*SGLANG_SLEEP_ON_IDLE) != "0" else []
    )
    out.notes.append(f"added the CPU tier's SGLang flags: {' '.join(cpu_args)}")
    out.env.update(CPU_SGLANG_ENV)
    out.unset.append("CUDA_VISIBLE_DEVICES")
    device_env_on_cpu(env, out)
    return join_args(kept) + cpu_args


def planned_args(
    pairs: list[tuple[str, str | None]],
    planned: dict[str, str],
    role: str,
    env: dict[str, str],
    out: Adapted,
) -> list[tuple[str, str | None]]:
    """The launcher's own memory flags replaced by the role's planned ones (GPU tier)."""
    values = {flag: env.get(var.format(role=role_key(role))) for flag, var in planned.items()}
    if not all(values.values()):
        return pairs
    dropped = [f"{n} {v}" for n, v in pairs if n in planned]
    kept = [(n, v) for n, v in pairs if n not in planned]
    kept += [(flag, value) for flag, value in values.items()]
    planned_text = " ".join(f"{f} {v}" for f, v in values.items())
    instead = f" (for the launcher's {', '.join(dropped)})" if dropped else ""
    out.notes.append(f"memory plan: {planned_text}{instead}")
    return kept


def encoder_env(role: str, env: dict[str, str], out: Adapted) -> None:
    """The Qwen-VL encode worker's own vLLM sized by the plan (VLLM_ENCODER_PLANNED)."""
    key = role_key(role)
    values = {name: env.get(var.format(role=key)) for name, var in VLLM_ENCODER_PLANNED.items()}
    if all(values.values()):
        out.env.update({name: str(value) for name, value in values.items()})
        out.notes.append("memory plan: " + " ".join(f"{n}={v}" for n, v in values.items()))


def gpu_position(role: str, env: dict[str, str], out: Adapted) -> None:
    """The role's GPU position (upstream's launchers set CUDA_VISIBLE_DEVICES=0, 1, 2 by layout)
    -> the device the harness leased for that position."""
    leased = [d for d in env.get(LEASED_GPUS_ENV, "").split(",") if d]
    position = env.get("CUDA_VISIBLE_DEVICES", "")
    if not leased or not position.isdigit():
        return
    if int(position) >= len(leased):
        raise Refused(
            f"CUDA_VISIBLE_DEVICES={position}: GPU position {position}, but the "
            f"harness leased {len(leased)} position(s) ({','.join(leased)})",
            fault="launcher",
        )
    device = leased[int(position)]
    out.env["CUDA_VISIBLE_DEVICES"] = device
    out.notes.append(f"GPU position {position} -> leased device {device}")


def xpu_device(
    pairs: list[tuple[str, str | None]], env: dict[str, str], out: Adapted
) -> list[tuple[str, str | None]]:
    """vLLM's XPU build: the role's device as its Level Zero device, eager, 64-token KV blocks
    (upstream xpu/disagg_multimodal_epd_xpu.sh)."""
    device = out.env.pop("CUDA_VISIBLE_DEVICES", None) or env.get("CUDA_VISIBLE_DEVICES")
    if device:
        out.env["ZE_AFFINITY_MASK"] = device
        out.unset.append("CUDA_VISIBLE_DEVICES")
    names = {name for name, _ in pairs}
    extra = [] if "--enforce-eager" in names else [("--enforce-eager", None)]
    kept = [(n, v) for n, v in pairs if n != "--block-size"] + [*extra, ("--block-size", "64")]
    for name, value in pairs:
        if name == "--kv-transfer-config":
            config = {**json.loads(value or "{}"), "kv_buffer_device": "xpu"}
            kept = [(n, compact(config) if n == name else v) for n, v in kept]
    out.notes.append("XPU: ZE_AFFINITY_MASK, --enforce-eager, --block-size 64")
    return kept


def nixl_lib_dir() -> str | None:
    """The NIXL C library the wheel ships (`.nixl_cu*.mesonpy.libs` in site-packages)."""
    real = os.environ.get(REAL_PYTHON_ENV, sys.executable)
    lib = Path(real).parent.parent / "lib"  # the venv's (not resolved: bin/python is a link)
    for libs in sorted(
        glob.glob(str(lib / "python3*" / "site-packages" / ".nixl_cu*.mesonpy.libs"))
    ):
        return libs
    return None


def frontend(args: list[str], env: dict[str, str], out: Adapted) -> list[str]:
    """The frontend decodes media itself (--frontend-decoding on the workers) only with NIXL's C
    library on its loader path; without it: "NIXL is not supported in stub mode"."""
    lib = nixl_lib_dir()
    path = env.get("LD_LIBRARY_PATH", "")
    if lib and lib not in path.split(":"):
        out.env["LD_LIBRARY_PATH"] = f"{lib}:{path}" if path else lib
        out.notes.append(f"LD_LIBRARY_PATH += {lib} (NIXL's library, for frontend decoding)")
    pairs = split_args(args)
    if env.get(DEVICE_ENV) == "cpu":
        block = CPU_KV_BLOCK[env.get(STACK_ENV, "dynamo-vllm")]
        for i, (name, value) in enumerate(pairs):
            if name == "--kv-cache-block-size" and value != block:
                pairs[i] = (name, block)
                out.notes.append(f"{name} {value} -> {block} (the CPU tier's KV block size)")
    return join_args(pairs)


# the flag a KV-aware frontend hashes requests by, and those a worker sizes its KV blocks with
ROUTER_BLOCK_FLAGS = ("--kv-cache-block-size",)
WORKER_BLOCK_FLAGS = ("--block-size", "--page-size")


def router_blocks_differ(block: str, asked: str) -> str:
    return (
        f"KV blocks of {block} tokens, while the KV-aware frontend hashes requests in "
        f"blocks of {asked} (--kv-cache-block-size): the router would find none of them"
    )


def flag_value(argv: list[str], flags: tuple[str, ...]) -> str | None:
    """The last value given to any of `flags` in `argv` (`--flag V` or `--flag=V`)."""
    found = None
    for word, after in zip(argv, [*argv[1:], None], strict=True):
        name, eq, value = word.partition("=")
        if name in flags:
            found = value if eq else after
    return found


def recorded_flag(log_dir: Path, role: str, flags: tuple[str, ...]) -> str | None:
    """A flag's value as the launcher gave it to `role` (its NAME.adapter.json), if recorded."""
    record = adapter_record(log_dir, role)
    argv = record.get("argv") if record else None
    if not isinstance(argv, list):
        return None  # not started (yet)
    return flag_value([str(a) for a in argv], flags)


def workers_off_the_router(log_dir: Path) -> dict[str, str]:
    """{worker: why} for every recorded worker whose KV block, as the launcher sized it, differs
    from the one the recorded KV-aware frontend hashes requests by: on any tier the router would
    match no block the worker publishes, the launcher's fault (the CPU tier gives both its own
    block size, CPU_KV_BLOCK, which would hide it). Each role's adapter writes its record, then
    looks: whichever of a worker and the frontend starts second sees the other's."""
    asked = recorded_flag(log_dir, "frontend", ROUTER_BLOCK_FLAGS)
    if asked is None:
        return {}
    off = {}
    suffix = ADAPTER_RECORD.format(role="")
    for path in sorted(log_dir.glob(f"*{suffix}")):
        role = path.name.removesuffix(suffix)
        block = recorded_flag(log_dir, role, WORKER_BLOCK_FLAGS) if role != "frontend" else None
        if block is not None and block != asked:
            off[role] = router_blocks_differ(block, asked)
    return off


def leased_ports(environ: dict[str, str]) -> dict[int, str]:
    """{port: the variable it was leased as}; empty outside the harness."""
    leased = json.loads(environ.get(LEASED_PORTS_ENV, "{}"))
    return {int(port): name for port, name in leased.items()}


def role_of(module: str, environ: dict[str, str]) -> str | None:
    """Our launchers name their roles (HARNESS_ROLE); a checkout's role is the one whose health
    port variable was leased as the system port it received, however the launcher computed it."""
    if environ.get(ROLE_ENV):
        return environ[ROLE_ENV]
    if module == "dynamo.frontend":
        return "frontend"
    port = environ.get(SYSTEM_PORT_ENV, "")
    by_var = json.loads(environ.get(ROLE_PORTS_ENV, "{}"))
    leased_as = leased_ports(environ).get(int(port)) if port.isdigit() else None
    if leased_as in by_var:
        return str(by_var[leased_as])
    return next((role for var, role in by_var.items() if port and environ.get(var) == port), None)


def argv_role(args: list[str], environ: dict[str, str]) -> str | None:
    """The profile's role a worker's command line says it is: its `--disaggregation-mode` (or
    older dynamo.vllm's `--multimodal-encode-worker`) where that names a role of the profile."""
    roles = set(json.loads(environ.get(ROLE_PORTS_ENV, "{}")).values())
    try:
        pairs = dict(split_args(args))
    except Refused:
        return None
    mode = "encode" if ENCODE_WORKER_SWITCH in pairs else pairs.get("--disaggregation-mode")
    return mode if mode in roles else None


def role_port_var(role: str, environ: dict[str, str]) -> str | None:
    """The health-port variable the profile gives a role (DYN_SYSTEM_PORT3 for decode)."""
    by_var = json.loads(environ.get(ROLE_PORTS_ENV, "{}"))
    return next((var for var, name in by_var.items() if name == role), None)


def unnamed_role(module: str, args: list[str], environ: dict[str, str]) -> Refused:
    """Why a worker cannot be told apart by its port: it has none, one nobody leased, or a leased
    one no role of the profile names; the role its command line says, where it says one."""
    port = environ.get(SYSTEM_PORT_ENV, "")
    roles = json.loads(environ.get(ROLE_PORTS_ENV, "{}"))
    offered = ", ".join(f"{var} for {role}" for var, role in roles.items())
    said = argv_role(args, environ)
    who = f"worker '{said}' (`-m {module}`, by its command line)" if said else f"`-m {module}`"
    own = role_port_var(said, environ) if said else None
    if not port:
        fix = (
            f"start it with {SYSTEM_PORT_ENV}=${{{own}}} (the harness's port for {said})"
            if own
            else f"give each worker {SYSTEM_PORT_ENV} from the harness's {offered}"
        )
        return Refused(
            f"{who} has no system port ({SYSTEM_PORT_ENV} unset; the launcher starts it without "
            f"one): its /health cannot be polled, so the profile's health contract is not met; "
            f"{fix}",
            fault="launcher",
            role=said,
        )
    leased_as = leased_ports(environ).get(int(port)) if port.isdigit() else None
    if leased_as is None and leased_ports(environ):
        return Refused(
            f"{who} has system port {SYSTEM_PORT_ENV}={port}, which nobody leased: the "
            f"harness hands out {offered} (a default the launcher fell back to collides with "
            "any other run)",
            int(port) if port.isdigit() else None,
            fault="launcher",
            role=said,
        )
    return Refused(
        f"cannot tell which role {who} with {SYSTEM_PORT_ENV}={port} is"
        + (f" ({leased_as}, which no worker role names)" if leased_as else "")
        + f": the profile's workers are {offered}",
        fault="launcher",
        role=said,
    )


def crossed_port(module: str, role: str, args: list[str], environ: dict[str, str]) -> None:
    """A worker whose command line names another role than the one whose port it was handed:
    the launcher crossed ports, and the worker holding the wrong one is the one named."""
    said = argv_role(args, environ)
    if said is None or said == role:
        return
    port = environ.get(SYSTEM_PORT_ENV, "")
    theirs = role_port_var(role, environ)
    own = role_port_var(said, environ)
    raise Refused(
        f"worker '{said}' (`-m {module}` with --disaggregation-mode {said}) was started on "
        f"{SYSTEM_PORT_ENV}={port}, the port of '{role}' ({theirs}): the launcher crossed its "
        f"ports; start '{said}' with {SYSTEM_PORT_ENV}=${{{own}}}",
        fault="launcher",
        role=said,
    )


def worker_index(environ: dict[str, str]) -> int | None:
    """i of the DYN_SYSTEM_PORT<i> the role's system port was leased as."""
    port = environ.get(SYSTEM_PORT_ENV, "")
    name = leased_ports(environ).get(int(port)) if port.isdigit() else None
    digits = (name or "").removeprefix(SYSTEM_PORT_ENV)
    return int(digits) if digits.isdigit() else None


def endpoint_port(endpoint: str) -> int | None:
    """The TCP port of a ZMQ endpoint (tcp://*:5557 -> 5557); None for ipc:// and the like."""
    if not endpoint.startswith("tcp://"):
        return None
    tail = endpoint.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def held_ports(
    module: str, pairs: list[tuple[str, str | None]], environ: dict[str, str], out: Adapted
) -> None:
    """Every port the role will bind, each leased by the harness: recorded in `out.ports`;
    where the launcher leaves one to the engine's fixed default, the role's leased one is given
    (upstream's contract: DYN_VLLM_NIXL_SIDE_CHANNEL_PORT<i>, ours: SGLANG_NCCL_PORT<i>).
    Raises Refused naming a port nobody leased."""
    leased = leased_ports(environ)
    if not leased:
        return  # not under the harness (a person running the adapter by hand)
    found: dict[str, int] = {}
    if module == "dynamo.frontend":
        flag = dict(pairs).get("--http-port")
        http = flag or environ.get(FRONTEND_PORT_ENV, "")
        if http.isdigit():
            found["--http-port" if flag else FRONTEND_PORT_ENV] = int(http)
    else:
        system = environ.get(SYSTEM_PORT_ENV, "")
        if system.isdigit():
            found[SYSTEM_PORT_ENV] = int(system)
    index = worker_index(environ)
    names = dict(pairs)
    if module == "dynamo.vllm" and "--kv-transfer-config" in names:
        given = environ.get(NIXL_PORT_ENV, "") or out.env.get(NIXL_PORT_ENV, "")
        if not given and index is not None:
            var = NIXL_LEASED.format(i=index)
            given = environ.get(var) or next((str(p) for p, n in leased.items() if n == var), "")
            if given:
                out.env[NIXL_PORT_ENV] = given
                out.notes.append(f"{NIXL_PORT_ENV}={given} ({var}; the launcher set none)")
        if given.isdigit():
            found[NIXL_PORT_ENV] = int(given)
    for name, value in pairs:
        if name in PORT_FLAGS and name != "--http-port" and value and value.isdigit():
            found[name] = int(value)
        if name == "--kv-events-config" and module == "dynamo.sglang":
            port = endpoint_port(json.loads(value or "{}").get("endpoint", ""))
            if port is not None:
                found["--kv-events-config"] = port
    for where, port in found.items():
        if port not in leased:
            raise Refused(
                f"would bind port {port} ({where}), which nobody leased: read it from a "
                "variable the harness exports (upstream's DYN_SYSTEM_PORT<i>, "
                "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT<i>, DYN_VLLM_KV_EVENT_PORT<i>, or one the "
                "launcher's text names); a fixed port collides with any other run",
                port,
                fault="launcher",
            )
    out.ports.update(found)


def nccl_port(
    pairs: list[tuple[str, str | None]], environ: dict[str, str], out: Adapted, role: str
) -> None:
    """SGLang's torch rendezvous on the role's leased port where the launcher passes none (SGLang
    would pick a free port itself, which no lease holds and no profile can name)."""
    index = worker_index(environ)
    if index is None:  # no system port: the index of the role's own health-port variable
        digits = (role_port_var(role, environ) or "").removeprefix(SYSTEM_PORT_ENV)
        index = int(digits) if digits.isdigit() else None
    var = SGLANG_NCCL_LEASED.format(i=index)
    port = environ.get(var, "")
    if index is None or "--nccl-port" in dict(pairs) or not port:
        return
    pairs.append(("--nccl-port", port))
    out.notes.append(f"added --nccl-port {port} ({var}; the launcher passes none)")


def adapt(argv: list[str], environ: dict[str, str]) -> Adapted:
    """The role and what it runs with on this tier. Raises Refused."""
    if len(argv) < 2 or argv[0] != "-m" or not argv[1].startswith("dynamo."):
        return Adapted(environ.get(ROLE_ENV), argv)  # a role of ours that is no engine: as is
    module, args = argv[1], argv[2:]
    role = role_of(module, environ)
    no_port = None
    if role is None:
        refused = unnamed_role(module, args, environ)
        if environ.get(SYSTEM_PORT_ENV) or refused.role is None:
            raise refused
        role, no_port = refused.role, str(refused)  # runs; the case fails after its answers
    if module != "dynamo.frontend" and ROLE_ENV not in environ and no_port is None:
        crossed_port(module, role, args, environ)
    out = Adapted(role, [], no_port=no_port)
    tier = environ.get(DEVICE_ENV, "gpu")
    if module == "dynamo.frontend":
        out.argv = ["-m", module, *frontend(args, environ, out)]
        held_ports(module, split_args(out.argv[2:]), environ, out)
        return out
    pairs = split_args(args)
    check_model(module, pairs, environ)
    if module == "dynamo.sglang":
        nccl_port(pairs, environ, out, role)
    held_ports(module, pairs, environ, out)
    if tier == "cpu" and module not in ("dynamo.vllm", "dynamo.sglang"):
        raise Refused(f"-m {module} (the CPU tier runs dynamo.vllm and dynamo.sglang workers)")
    if module == "dynamo.vllm":
        kv_events_args(pairs, out)
    if tier == "cpu":
        adapt_cpu = cpu_vllm_args if module == "dynamo.vllm" else cpu_sglang_args
        out.argv = ["-m", module, *adapt_cpu(pairs, environ, out)]
        return out
    gpu_position(role, environ, out)
    if module == "dynamo.vllm":
        if dict(pairs).get("--disaggregation-mode") == "encode":
            encoder_env(role, environ, out)
        pairs = planned_args(pairs, VLLM_PLANNED, role, environ, out)
    elif module == "dynamo.sglang":
        pairs = planned_args(pairs, SGLANG_PLANNED, role, environ, out)
    if tier == "xpu":
        pairs = xpu_device(pairs, environ, out)
    out.argv = ["-m", module, *join_args(pairs)]
    return out


# What `harness audit` reads of a role's environment (ports, devices, health, model), secrets out.
AUDIT_PREFIXES = ("DYN_", "VLLM_", "SGLANG_", "HARNESS_", "NIXL_", "UCX_", "ZMQ_")
AUDIT_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "MODEL",
    "SERVED_MODEL_NAME",
    "LD_LIBRARY_PATH",
)


def audit_view(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(AUDIT_PREFIXES) or k in AUDIT_NAMES) and not is_secret(k)
    }


def contract_files(log_dir: Path, role: str) -> None:
    """NAME.pid, and this process's output into NAME.log (the launcher contract)."""
    (log_dir / f"{role}.pid").write_text(f"{os.getpid()}\n")
    fd = os.open(log_dir / f"{role}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def refuse(refused: Refused, environ: dict[str, str], log_dir: Path) -> NoReturn:
    """This role does not start: NAME.refused says why (the harness names it), exit 2."""
    role = refused.role or (role_of(sys.argv[2], environ) if len(sys.argv) > 2 else None)
    record = {
        "role": role or "unknown",
        "argv": sys.argv[1:],
        "refused": str(refused),
        "port": refused.port,
        "fault": refused.fault,
    }
    written(log_dir / REFUSED_RECORD.format(role=role or "unknown"), record)
    tier = environ.get(DEVICE_ENV, "gpu")
    says = (
        "the launcher is at fault"
        if refused.fault == "launcher"
        else f"cannot run on the {tier} tier"
    )
    print(f"harness role adapter: role {role or '?'}: {says}: {refused}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    environ = dict(os.environ)
    real = environ[REAL_PYTHON_ENV]
    log_dir = Path(environ.get(LOG_DIR_ENV) or ".")
    try:
        adapted = adapt(sys.argv[1:], environ)
    except Refused as refused:
        refuse(refused, environ, log_dir)
    # the role's own processes are no roles: a `python3` they start runs as is
    env = {k: v for k, v in environ.items() if k not in {*adapted.unset, ROLE_ENV}}
    env.update(adapted.env)
    if adapted.role is not None:  # what the role site's taps name their files by
        env[TAPPED_ROLE_ENV] = adapted.role
    if adapted.role is not None:
        done: dict[str, object] = {
            "role": adapted.role,
            "argv": sys.argv[1:],
            "python": adapted.python or real,
            "exec": adapted.argv,
            "env": adapted.env,
            "unset": adapted.unset,
            "rewrites": adapted.notes,
            "ports": adapted.ports,
        }
        dry = environ.get(DRY_ENV) == "1"
        if dry:
            done["seen_env"] = audit_view(env)
        written(log_dir / ADAPTER_RECORD.format(role=adapted.role), done)
        off_the_router = workers_off_the_router(log_dir)
        for worker, why in off_the_router.items():
            if worker == adapted.role:
                refuse(Refused(why, role=worker, fault="launcher"), environ, log_dir)
            else:  # started first: the frontend, now recorded, names it
                record = {"role": worker, "argv": [], "refused": why, "fault": "launcher"}
                written(log_dir / REFUSED_RECORD.format(role=worker), record)
        if adapted.no_port:
            written(log_dir / f"{adapted.role}{NO_PORT_SUFFIX}", {"refused": adapted.no_port})
        if dry:
            return
        if environ.get(CONTRACT_ENV) == "1":
            contract_files(log_dir, adapted.role)
    python = adapted.python or real
    os.execve(python, [python, *adapted.argv], env)


if __name__ == "__main__":
    main()
