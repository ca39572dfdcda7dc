"""Everything that crosses into a role's process, named once: the environment variables the
harness writes and the role adapter (harness/launch/role_adapter.py), the role site
(harness/launch/role_site/sitecustomize.py) or a launcher (launchers/lib/common.sh) reads; the
files a role's adapter writes into the launch's logs directory and the harness reads back; and
the one rule for which variables are secrets. Standard library only: the role adapter and the
role site load it in processes that run before (or without) the harness's dependencies.

A change that crosses the process boundary starts here: a new variable or record file is named
in this module, written by the harness side (launch/plan.py, machine/memory_plan.py), read by
the role side (role_adapter.py, the role site, a launcher), and both import the name from here
(docs/explanation/architecture.md, "Where a change that crosses into a role's process goes")."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

# -- what the harness tells the role adapter (launch/plan.py adapter_env writes them) --------
REAL_PYTHON_ENV = "HARNESS_REAL_PYTHON"  # what the adapter execs each role with
ADAPTER_PYTHON_ENV = "HARNESS_ADAPTER_PYTHON"  # runs the adapter (role_adapter_bin/python)
ADAPTER_ENV = "HARNESS_ROLE_ADAPTER"  # the adapter's file
ROLE_ENV = "HARNESS_ROLE"  # set by our launchers' start_role; a checkout's roles are found by port
ROLE_PORTS_ENV = "HARNESS_ROLE_PORTS"  # {"DYN_SYSTEM_PORT1": "encode", ...}
LEASED_PORTS_ENV = "HARNESS_LEASED_PORTS"  # {"21301": "DYN_SYSTEM_PORT1", ...}: every leased port
CPU_MODEL_ENV = "HARNESS_CPU_MODEL"  # the tiny checkpoint of the profile's architecture family
# its family's dtype (harness/core/precision.py FAMILY_DTYPE, the dtype the checkpoint is saved
# in): every CPU engine's --dtype, so a family whose kernels take no float32 runs in the dtype
# its reference is computed in
CPU_DTYPE_ENV = "HARNESS_CPU_DTYPE"
# a profile's longer context than the CPU flags' 2,048 tokens (its cpu env): upstream's long
# cached-prompt cases (mm_agg_router_qwen3.5-0.8b's 120 filler copies)
CPU_MAX_MODEL_LEN_ENV = "HARNESS_CPU_MAX_MODEL_LEN"
PROFILE_MODEL_ENV = "HARNESS_PROFILE_MODEL"  # the model id the profile serves
PROFILE_ENV = "HARNESS_PROFILE"
# the leased device of each GPU position, e.g. "3,3,5" (not machine/gpus.py's HARNESS_GPUS, a
# simulated inventory)
LEASED_GPUS_ENV = "HARNESS_LEASED_GPUS"
DEVICE_ENV = "HARNESS_DEVICE"  # the tier the role runs on: "cpu" or "gpu"
STACK_ENV = "HARNESS_STACK"
LOG_DIR_ENV = "HARNESS_LOG_DIR"  # the launch's logs/: NAME.adapter.json, NAME.refused, …
DRY_ENV = "HARNESS_ADAPTER_DRY"  # audit: record the decisions, start nothing
CONTRACT_ENV = "HARNESS_ADAPTER_CONTRACT"  # 1: the adapter writes NAME.pid and NAME.log
SGLANG_PYTHON_ENV = "HARNESS_SGLANG_PYTHON"  # the CPU tier's SGLang venv's interpreter

# -- the GPU memory plan's variables (machine/memory_plan.py writes them; the adapter and
# launchers/lib/common.sh read them); `{role}` is `role_key(role)` ----------------------------
MAX_MODEL_LEN_ENV = "HARNESS_MAX_MODEL_LEN"
MAX_NUM_SEQS_ENV = "HARNESS_MAX_NUM_SEQS"
MAX_NUM_BATCHED_TOKENS_ENV = "HARNESS_MAX_NUM_BATCHED_TOKENS"
KV_BYTES_ENV = "HARNESS_KV_BYTES_{role}"
GPU_UTIL_ENV = "HARNESS_GPU_UTIL_{role}"
KV_TOKENS_ENV = "HARNESS_KV_TOKENS_{role}"
MEM_FRACTION_ENV = "HARNESS_MEM_FRACTION_{role}"


def role_key(role: str) -> str:
    """'prefill' -> 'PREFILL': the suffix of the plan's per-role variables."""
    return role.upper().replace("-", "_")


# -- ports a role is handed (launch/port_contract.py leases them) ----------------------------
FRONTEND_PORT_ENV = "DYN_HTTP_PORT"  # dynamo.frontend reads it itself
SYSTEM_PORT_ENV = "DYN_SYSTEM_PORT"  # a worker's /health, /metrics
NIXL_PORT_ENV = "VLLM_NIXL_SIDE_CHANNEL_PORT"
# The leased port a role gets where its launcher passes none, by the role's worker index i (its
# system port is DYN_SYSTEM_PORT<i>).
NIXL_LEASED = "DYN_VLLM_NIXL_SIDE_CHANNEL_PORT{i}"
SGLANG_NCCL_LEASED = "SGLANG_NCCL_PORT{i}"

# -- what the role site reads (launch/role_site/sitecustomize.py) ----------------------------
ENCODER_TAP_ENV = "HARNESS_ENCODER_TAP"  # where the taps write the encoder's rows (CPU tier)
IMPORT_RECORDS_ENV = "HARNESS_IMPORT_RECORDS"  # where each role records its Dynamo imports
TAPPED_ROLE_ENV = "HARNESS_TAPPED_ROLE"  # the role's name, for the taps' files (not a role)
# A file the harness creates just before it stops the topology: a role whose own exit (signal
# handlers, atexit) is done then leaves at once instead of finalising its interpreter.
STOPPING_ENV = "HARNESS_STOPPING"
STOPPING_FILE = "stopping"  # in the launch's scratch directory

# -- the files a role's adapter writes into the launch's logs directory -------------------------
ADAPTER_RECORD = "{role}.adapter.json"  # every decision the adapter made for the role
REFUSED_RECORD = "{role}.refused"  # why the adapter refused to start it
NO_PORT_SUFFIX = ".noport"  # NAME.noport: a worker run without a system port


def written(path: Path, record: Mapping[str, object]) -> None:
    """A JSON record written whole or not at all: the harness polls for the file."""
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps(record) + "\n")
    partial.replace(path)


def adapter_record(log_dir: Path, role: str) -> dict[str, object] | None:
    """The role's NAME.adapter.json, where it has written one."""
    try:
        found = json.loads((log_dir / ADAPTER_RECORD.format(role=role)).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def no_port_roles(log_dir: Path) -> dict[str, str]:
    """{worker: why} for each worker its adapter saw started without a system port."""
    out = {}
    for path in sorted(log_dir.glob(f"*{NO_PORT_SUFFIX}")):
        record = json.loads(path.read_text())
        out[path.name.removesuffix(NO_PORT_SUFFIX)] = str(record.get("refused", ""))
    return out


# -- secrets: the one rule (core/secrets.py shows them, the adapter keeps them out of records) --
SECRET_NAME = re.compile(
    r"(^HF_TOKEN$|TOKEN$|_API_KEY$|^API_KEY$|_SECRET$|^SECRET$|PASSWORD)", re.I
)


def is_secret(name: str) -> bool:
    """HF_TOKEN, *_TOKEN, *_API_KEY, *_SECRET, anything with PASSWORD: e.g. is_secret("HF_TOKEN")"""
    return bool(SECRET_NAME.search(name))
