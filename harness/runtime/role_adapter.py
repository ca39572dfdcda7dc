"""Stands in for `python` between a Dynamo checkout's own launcher and the engine (run as a script,
stdlib only: it is every role's first process). The launcher runs unmodified; each
`python -m dynamo.<component> ...` it starts comes here first, which

- names the role: `dynamo.frontend` is the frontend; a worker is the role whose health-port
  variable holds the DYN_SYSTEM_PORT it was given (HARNESS_ROLE_PORTS, from the profile);
- gives it the harness's launcher contract: NAME.pid, its output in NAME.log;
- on the CPU tier, maps its command line to the CPU tier's (the tiny checkpoint for `--model`,
  the CPU engine flags of launchers/lib/cpu_engine_args instead of the GPU-only ones, NIXL on CPU
  buffers, `tcp://*` KV-event publishers moved to ipc:// sockets), and refuses, naming the flag
  and the role, anything it cannot map (NAME.refused; the harness fails `launcher_invalid`):
  never a silent drop. Every rewrite is written to NAME.adapter.json (`harness audit` and
  failures show it);
- then execs the real interpreter. Anything else (`python -c …`, `python3 script.py`) runs as is.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

REAL_PYTHON_ENV = "HARNESS_REAL_PYTHON"
ROLE_PORTS_ENV = "HARNESS_ROLE_PORTS"  # {"DYN_SYSTEM_PORT1": "encode", ...}
CPU_MODEL_ENV = "HARNESS_CPU_MODEL"
CPU_ARGS_FILE = Path(__file__).resolve().parents[2] / "launchers" / "lib" / "cpu_engine_args"
DRY_ENV = "HARNESS_ADAPTER_DRY"  # audit: record the rewrites, start nothing

# dynamo.vllm flags that mean the same on the CPU tier: passed through as they are.
KEEP_SWITCHES = {
    "--enable-multimodal", "--route-to-encoder", "--enable-mm-embeds", "--frontend-decoding",
    "--enable-prefix-caching", "--no-enable-prefix-caching", "--trust-remote-code",
    "--is-prefill-worker", "--is-decode-worker",
}  # fmt: skip
KEEP_VALUED = {
    "--disaggregation-mode", "--served-model-name", "--limit-mm-per-prompt", "--max-num-seqs",
    "--embedding-transfer-mode", "--namespace", "--component", "--endpoint",
    "--multimodal-embedding-cache-capacity-gb", "--connector", "--router-mode",
}  # fmt: skip
# GPU-only sizing the CPU tier's own flags replace (launchers/lib/cpu_engine_args).
REPLACED_VALUED = {
    "--gpu-memory-utilization", "--kv-cache-memory-bytes", "--max-model-len", "--dtype",
    "--max-num-batched-tokens", "--block-size", "--tensor-parallel-size",
}  # fmt: skip
REPLACED_SWITCHES = {"--enforce-eager"}
# Roles that hand media embeddings across processes: on CPU through a file (local), since the
# default nixl-write pre-allocates an 8 GiB receive buffer (launchers/lib/common.sh).
EMBEDDING_TRANSFER = "--embedding-transfer-mode"


class Refused(Exception):
    """A command line the CPU tier cannot run; the message names the flag."""


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
        elif name in KEEP_SWITCHES or name in REPLACED_SWITCHES:
            out.append((name, None))
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append((name, args[i + 1]))
            i += 1
        else:
            out.append((name, None))
        i += 1
    return out


def kv_events_endpoint(endpoint: str) -> str:
    """tcp://*:P and tcp://0.0.0.0:P -> an ipc:// socket in the role's TMPDIR (the topology's
    scratch). Not tcp://127.0.0.1:P: vLLM 0.31's ZmqEventPublisher binds only wildcard and ipc://
    endpoints and connects to any other (distributed/kv_events.py `_is_bind_endpoint`), and
    dynamo.vllm's reader connects too, so no KV event would flow and the KV router would route
    blind (measured: router_kv_hit_rate 0). A socket file listens on no network."""
    for host in ("tcp://*:", "tcp://0.0.0.0:"):
        if endpoint.startswith(host):
            tmp = os.environ.get("TMPDIR", "/tmp")
            return f"ipc://{tmp}/kv-events-{endpoint[len(host) :]}"
    return endpoint


def cpu_worker_args(args: list[str], model_dir: str, served: str) -> tuple[list[str], list[str]]:
    """A dynamo.vllm worker's argv for the CPU tier, and one line per rewrite."""
    out: list[str] = []
    notes: list[str] = []
    named_served = False
    for name, value in split_args(args):
        if name == "--model":
            out += ["--model", model_dir]
            notes.append(f"--model {value} -> the tiny checkpoint {model_dir}")
        elif name in REPLACED_VALUED or name in REPLACED_SWITCHES:
            notes.append(f"dropped {name}{'' if value is None else ' ' + value} (GPU sizing; "
                         "the CPU tier's own flags replace it)")  # fmt: skip
        elif name == "--kv-transfer-config":
            config = json.loads(value or "{}")
            if config.get("kv_connector") != "NixlConnector":
                raise Refused(f"{name} with connector {config.get('kv_connector')!r} (the CPU "
                              "tier runs NixlConnector on CPU buffers only)")  # fmt: skip
            if config.get("kv_buffer_device") != "cpu":
                config["kv_buffer_device"] = "cpu"
                notes.append(f"{name}: kv_buffer_device -> cpu")
            out += [name, json.dumps(config)]
        elif name == "--kv-events-config":
            config = json.loads(value or "{}")
            endpoint = config.get("endpoint", "")
            config["endpoint"] = kv_events_endpoint(endpoint)
            if config["endpoint"] != endpoint:
                notes.append(f"{name}: endpoint {endpoint} -> {config['endpoint']}")
            out += [name, json.dumps(config)]
        elif name in KEEP_SWITCHES and value is None:
            out.append(name)
        elif name in KEEP_VALUED and value is not None:
            named_served = named_served or name == "--served-model-name"
            out += [name, value]
        else:
            raise Refused(f"{name}{'' if value is None else ' ' + value}")
    if not named_served:
        out += ["--served-model-name", served]
        notes.append(f"added --served-model-name {served}")
    cpu = shlex.split(CPU_ARGS_FILE.read_text().split("\n#", 1)[0])
    cpu += ["--kv-cache-memory-bytes", os.environ.get("HARNESS_CPU_KV_BYTES", "64M")]
    out += cpu
    notes.append(f"added the CPU tier's engine flags: {' '.join(cpu)}")
    mode = dict(split_args(out)).get("--disaggregation-mode")
    if EMBEDDING_TRANSFER not in out and ("--route-to-encoder" in out or mode == "encode"):
        out += [EMBEDDING_TRANSFER, "local"]
        notes.append(f"added {EMBEDDING_TRANSFER} local (nixl-write pre-allocates 8 GiB)")
    return out, notes


def role_of(module: str, environ: dict[str, str]) -> str | None:
    if module == "dynamo.frontend":
        return "frontend"
    port = environ.get("DYN_SYSTEM_PORT")
    by_var = json.loads(environ.get(ROLE_PORTS_ENV, "{}"))
    return next((role for var, role in by_var.items() if port and environ.get(var) == port), None)


def adapt(argv: list[str], environ: dict[str, str]) -> tuple[str | None, list[str], list[str]]:
    """(role, the argv to exec after the interpreter, rewrites). Raises Refused."""
    if len(argv) < 2 or argv[0] != "-m" or not argv[1].startswith("dynamo."):
        return None, argv, []
    module, args = argv[1], argv[2:]
    role = role_of(module, environ)
    if role is None:
        raise Refused(f"cannot tell which role `-m {module}` with DYN_SYSTEM_PORT="
                      f"{environ.get('DYN_SYSTEM_PORT')} is (HARNESS_ROLE_PORTS names "
                      f"{environ.get(ROLE_PORTS_ENV)})")  # fmt: skip
    if environ.get("HARNESS_DEVICE") != "cpu" or module != "dynamo.vllm":
        return role, argv, []
    args, notes = cpu_worker_args(args, environ[CPU_MODEL_ENV], environ["SERVED_MODEL_NAME"])
    return role, ["-m", module, *args], notes


def contract_files(log_dir: Path, role: str) -> None:
    """NAME.pid, and this process's output into NAME.log (the launcher contract)."""
    (log_dir / f"{role}.pid").write_text(f"{os.getpid()}\n")
    fd = os.open(log_dir / f"{role}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main() -> None:
    environ = dict(os.environ)
    real = environ[REAL_PYTHON_ENV]
    log_dir = Path(environ.get("HARNESS_LOG_DIR") or ".")
    try:
        role, argv, notes = adapt(sys.argv[1:], environ)
    except Refused as refused:
        role = role_of(sys.argv[2], environ) if len(sys.argv) > 2 else None
        record = {"role": role or "unknown", "argv": sys.argv[1:], "refused": str(refused)}
        (log_dir / f"{role or 'unknown'}.refused").write_text(json.dumps(record) + "\n")
        print(f"harness role adapter: role {role or '?'}: cannot run on the CPU tier: "
              f"{refused}", file=sys.stderr)  # fmt: skip
        raise SystemExit(2) from None
    if role is not None:
        record = {"role": role, "argv": sys.argv[1:], "exec": argv, "rewrites": notes}
        (log_dir / f"{role}.adapter.json").write_text(json.dumps(record, indent=1) + "\n")
        if environ.get(DRY_ENV) == "1":
            return
        contract_files(log_dir, role)
    os.execv(real, [real, *argv])


if __name__ == "__main__":
    main()
