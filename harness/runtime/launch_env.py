"""The environment a launcher runs under: tier settings, ports, per-topology dirs, markers."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from harness.core.paths import cache_dir
from harness.profiles import Tier


def cache_env(tier: Tier) -> dict[str, str]:
    """Compile and model-info caches survive between topologies (an empty one costs ~13 s)."""
    if tier == "gpu":
        return {}
    cache = cache_dir()
    return {
        "HOME": str(cache / "home"),  # Dynamo's model-card cache goes to $HOME/.cache/dynamo
        "HF_HOME": str(cache / "hf"),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
    }


SCRATCH_SUBDIRS = ("discovery", "tmp", "rpc")


def scratch_env(scratch_dir: Path) -> dict[str, str]:
    """Per-topology scratch: discovery, temp files and RPC sockets never outlive the topology.

    Kept apart from the run dir (logs) and short: vLLM's IPC socket paths must fit in 107 bytes.
    """
    return {
        "DYN_FILE_KV": str(scratch_dir / "discovery"),
        "TMPDIR": str(scratch_dir / "tmp"),
        "VLLM_RPC_BASE_PATH": str(scratch_dir / "rpc"),
    }


def launcher_env(
    *,
    tier: Tier,
    model: str,
    served_model_name: str,
    ports: Mapping[str, int],
    scratch_dir: Path,
    log_dir: Path,
    extra: Mapping[str, str],
    marker_env: Mapping[str, str],
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(cache_env(tier))
    env.update(scratch_env(scratch_dir))
    env.update(extra)
    env.update({k: str(v) for k, v in ports.items()})
    env.update(
        {
            "HARNESS_DEVICE": tier,
            "HARNESS_MANAGED_PORTS": "1",
            "HARNESS_LOG_DIR": str(log_dir),
            "MODEL": model,
            "SERVED_MODEL_NAME": served_model_name,
            "PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    env.update(marker_env)
    return env


def remove_scratch_of(environ: Mapping[str, str]) -> None:
    """Remove the scratch dir a swept process used (found from its DYN_FILE_KV), if it is ours."""
    kv = environ.get("DYN_FILE_KV")
    if not kv:
        return
    scratch = Path(kv).parent
    if scratch.name.startswith("harness-") and Path(kv).name == "discovery":
        shutil.rmtree(scratch, ignore_errors=True)
