"""The CPU tier's roles start with the harness's GC thresholds: the launcher environment carries
HARNESS_GC_THRESHOLD and the venv's start-up hook (scripts/apply_shims.py) applies it in every
interpreter, the ones multiprocessing spawns (vLLM's engine cores) included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch.plan import GC_THRESHOLD_CPU, GC_THRESHOLD_ENV, gc_env, launcher_env
from harness.profiles import Tier

# What a role prints: its own thresholds, then those of a child started the way vLLM starts its
# engine core on the CPU platform (multiprocessing's spawn: a fresh interpreter).
PROBE = """
import gc, multiprocessing as mp
def child(q):
    q.put(gc.get_threshold())
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(gc.get_threshold(), q.get(timeout=60))
    p.join()
"""


def role_env(tmp_path: Path, tier: Tier, base: dict[str, str]) -> dict[str, str]:
    return launcher_env(
        tier=tier,
        model="m",
        served_model_name="m",
        ports={},
        scratch_dir=tmp_path / "scratch",
        log_dir=tmp_path / "logs",
        extra={},
        marker_env={},
        base=base,
    )


def thresholds_seen(tmp_path: Path, env: dict[str, str]) -> str:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = subprocess.run(
        [sys.executable, str(probe)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_a_cpu_role_and_the_process_it_spawns_start_with_the_threshold(tmp_path: Path) -> None:
    env = role_env(tmp_path, "cpu", {"PATH": "/usr/bin:/bin"})
    assert env[GC_THRESHOLD_ENV] == GC_THRESHOLD_CPU == "700,10,1000"
    assert thresholds_seen(tmp_path, env) == "(700, 10, 1000) (700, 10, 1000)"


def test_empty_leaves_the_interpreter_its_own_thresholds(tmp_path: Path) -> None:
    env = role_env(tmp_path, "cpu", {"PATH": "/usr/bin:/bin", GC_THRESHOLD_ENV: ""})
    assert thresholds_seen(tmp_path, env) == "(700, 10, 10) (700, 10, 10)"


def test_gpu_roles_are_left_alone_and_a_bad_value_is_named() -> None:
    assert gc_env("gpu", {}) == {}
    assert gc_env("cpu", {GC_THRESHOLD_ENV: "1,2,3"}) == {GC_THRESHOLD_ENV: "1,2,3"}
    for bad in ("700,10", "a,b,c", "700,-1,10"):
        with pytest.raises(ValueError, match=f"{GC_THRESHOLD_ENV}='{bad}': expected three"):
            gc_env("cpu", {GC_THRESHOLD_ENV: bad})
