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


GC_THRESHOLD_ENV = "HARNESS_GC_THRESHOLD"
# Python's cyclic GC during a role's start-up: `import dynamo.vllm.main` runs 9 full (gen 2)
# collections, 2.6 of its 10.8 CPU-s (counted with gc.callbacks, 2026-12-02, the 2-core box), and
# the engine core vLLM spawns imports it all again. With a third threshold of 1000 (CPython's
# default is 10) the same import runs none: 0.5 s of GC, 8.0 CPU-s. The objects made at import live
# for the whole run, so those collections free almost nothing (691k objects left without them,
# 689k with); vLLM freezes its heap itself once the engine is up (vllm/v1/engine/core.py,
# freeze_gc_heap). The hook that reads it is the venv's serve_harness_gc.pth
# (scripts/apply_shims.py). Empty: the interpreter's own thresholds.
GC_THRESHOLD_CPU = "700,10,1000"


def gc_env(tier: Tier, environ: Mapping[str, str]) -> dict[str, str]:
    """CPU tier: the GC thresholds the roles start with (HARNESS_GC_THRESHOLD, or the default)."""
    if tier != "cpu":
        return {}
    value = environ.get(GC_THRESHOLD_ENV, GC_THRESHOLD_CPU)
    parts = value.split(",")
    if value and (len(parts) != 3 or not all(p.strip().isdigit() for p in parts)):
        raise ValueError(
            f"{GC_THRESHOLD_ENV}={value!r}: expected three non-negative integers "
            "(gc.set_threshold's gen0,gen1,gen2, e.g. 700,10,1000) or empty for Python's own"
        )
    return {GC_THRESHOLD_ENV: value}


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
    env.update(gc_env(tier, env))
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
