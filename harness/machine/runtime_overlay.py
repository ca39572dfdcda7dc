"""The ai-dynamo-runtime a Dynamo checkout pins, when it is not the one installed here: its wheel
from the package index, unpacked once per version into a cache directory (`pip install --no-deps
--target`) that goes on every role's PYTHONPATH ahead of site-packages, so `dynamo._core` and the
runtime's own Python come from it while everything else (the engines, the checkout's
components) stays as it is. The wheel is abi3 (`cp310-abi3`), so one directory serves the CPU
tier's vLLM venv and its SGLang venv alike.

Also: which runtime an interpreter or a directory holds (`runtime_version_of`, `_at`)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from filelock import FileLock

from harness.core.paths import cache_dir

RUNTIME = "ai-dynamo-runtime"
# pip's download and unpack of one ~40 MB wheel; a slow index gets this long before we give up
PIP_TIMEOUT_S = 600


class RuntimeUnavailable(RuntimeError):
    """The index cannot serve the pinned runtime (the message quotes pip's own last line)."""


def runtime_version_at(directory: Path) -> str | None:
    """The runtime's version a directory holds (its dist-info), or None."""
    for dist in metadata.distributions(path=[str(directory)]):
        if dist.metadata["Name"] == RUNTIME:
            return dist.version
    return None


def runtime_version_of(python: Path) -> str | None:
    """The runtime's version the interpreter `python` imports, or None (not installed there)."""
    code = (
        "from importlib import metadata\n"
        f"try: print(metadata.version({RUNTIME!r}))\n"
        "except metadata.PackageNotFoundError: pass\n"
    )
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout.strip() or None


def pinned_runtime(version: str) -> Path:
    """A directory holding ai-dynamo-runtime==`version` from the index (built once, cached)."""
    target = cache_dir() / "runtimes" / version
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if runtime_version_at(target) == version:
            return target
        partial = target.with_name(f"{version}.partial")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
                str(partial),
                f"{RUNTIME}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeUnavailable(f"pip install {RUNTIME}=={version}: {last}")
        partial.rename(target)
    return target
