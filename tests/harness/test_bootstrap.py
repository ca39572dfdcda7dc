"""scripts/bootstrap.sh around an already built venv: the tier it builds for follows `--tier` of
scripts/serve-suite, and pruning old venvs never removes one a running suite holds."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The scripts and requirements of this checkout, copied (bootstrap links <root>/.venv)."""
    root = tmp_path / "repo"
    for part in ("scripts", "requirements"):
        shutil.copytree(REPO_ROOT / part, root / part)
    return root


def venv_key(root: Path, tier: str) -> str:
    """The key bootstrap.sh derives: tier + sha256 of the lock, harness pins, shims, itself."""
    lock = "cpu.lock" if tier == "cpu" else "gpu-vllm.txt"
    parts = [
        root / "requirements" / lock,
        root / "requirements" / "harness.txt",
        root / "scripts" / "apply_shims.py",
        root / "scripts" / "bootstrap.sh",
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()[:16]
    return f"{tier}-{digest}"


# these tests are about the vLLM venv; the SGLang one would build for real (~3 min) in their cache
NO_SGLANG = {"HARNESS_SGLANG_CPU": "0"}


def fake_venv(cache: Path, name: str, age_s: float) -> Path:
    venv = cache / "venvs" / name
    (venv / "bin").mkdir(parents=True)
    (venv / ".complete").touch()
    stamp = time.time() - age_s
    os.utime(venv, (stamp, stamp))
    return venv


def test_pruning_keeps_three_and_never_a_venv_in_use(checkout: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    current = fake_venv(cache, venv_key(checkout, "cpu"), 0)
    old = [fake_venv(cache, f"cpu-old{i}", 100 * (i + 1)) for i in range(4)]  # old0 newest
    held = old[3]  # the oldest: pruned first, unless a running suite holds it
    holder = subprocess.Popen(["flock", "-s", str(held / ".in-use"), "sleep", "30"])
    try:
        time.sleep(0.3)
        stamp = time.time() - 400  # creating the lock file touched the directory
        os.utime(held, (stamp, stamp))
        env = {**os.environ, "HARNESS_CACHE": str(cache), "HARNESS_TIER": "cpu", **NO_SGLANG}
        run = subprocess.run(
            ["bash", str(checkout / "scripts/bootstrap.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 0, run.stderr
    assert (checkout / ".venv").resolve() == current
    left = sorted(p.name for p in (cache / "venvs").iterdir() if p.is_dir())
    assert left == sorted([current.name, old[0].name, old[1].name, held.name])
    assert f"kept {held}: a running suite uses it" in run.stderr


def test_serve_suite_tier_flag_reaches_bootstrap(checkout: Path, tmp_path: Path) -> None:
    """`--tier cpu` picks the CPU venv even where NVML would say GPU (here: HARNESS_TIER unset
    and a stand-in nvidia-smi that lists a GPU; bootstrap's own tier detection)."""
    cache = tmp_path / "cache"
    cpu = fake_venv(cache, venv_key(checkout, "cpu"), 0)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"  # TEST DOUBLE: a GPU runner's nvidia-smi, on a CPU box
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-x)'\n")
    smi.chmod(0o755)
    (cpu / "bin" / "python").write_text('#!/bin/sh\necho "python $*"\n')
    (cpu / "bin" / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_TIER"}
    env |= {"HARNESS_CACHE": str(cache), "PATH": f"{fake_bin}:{env['PATH']}", **NO_SGLANG}
    run = subprocess.run(
        ["bash", str(checkout / "scripts/serve-suite"), "--tier", "cpu", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert (checkout / ".venv").resolve() == cpu
    assert "python -m pytest tests/serve -m post_merge" in run.stdout and "--tier cpu" in run.stdout


def test_each_checkout_imports_its_own_harness_from_the_shared_venv(tmp_path: Path) -> None:
    """One cached venv serves every checkout of a lock; a process started through a checkout's
    .venv (the interpreter or the console script, from any directory) or inside it imports that
    checkout's `harness`, whichever bootstrapped last (scripts/serve_harness_checkout.py)."""
    clone = tmp_path / "second"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to((REPO_ROOT / ".venv").resolve())
    where = "import harness; print(harness.__file__)"
    for root in (clone, REPO_ROOT):
        seen = subprocess.run(
            [str(root / ".venv" / "bin" / "python"), "-c", where],
            cwd="/",
            capture_output=True,
            text=True,
            check=True,
        )
        assert seen.stdout.strip() == str(root / "harness" / "__init__.py")
    script = subprocess.run(
        [str(clone / ".venv" / "bin" / "serve-harness"), "list", "--help"],
        cwd="/",
        env={**os.environ, "COLUMNS": "1000"},  # no wrapping inside the path
        capture_output=True,
        text=True,
        check=True,
    )
    profiles = [line for line in script.stdout.splitlines() if "profiles directory" in line]
    assert profiles and profiles[0].endswith(f"profiles directory ({clone}/profiles)"), profiles
    inside = subprocess.run(  # the shared interpreter by its own path, inside the clone
        [str((REPO_ROOT / ".venv").resolve() / "bin" / "python"), "-c", where],
        cwd=clone / "docs",
        capture_output=True,
        text=True,
        check=True,
    )
    assert inside.stdout.strip() == str(clone / "harness" / "__init__.py")
