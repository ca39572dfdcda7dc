"""The installed ai-dynamo with a patch applied, laid out as a Dynamo checkout holding only its
Python (`.serve-harness-python-only`, so its launches run our launchers and say so): what `validate
patch` runs side B on, and what the defect proofs of docs/explanation/upstream-defects.md put in
front of the installed package. Nothing installed is modified."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from harness.core.paths import runs_dir
from harness.launch.dynamo_src import PYTHON_ONLY

TOUCHED = re.compile(r"^\+\+\+ (?:b/)?(dynamo/\S+)", re.MULTILINE)


class PatchError(ValueError):
    """A patch that cannot make a checkout; the message names the file and why."""


def touched_files(patch: Path) -> list[str]:
    """The site-packages paths the patch changes, e.g. dynamo/vllm/multimodal_utils/model.py."""
    files = TOUCHED.findall(patch.read_text())
    if not files:
        raise PatchError(
            f"{patch}: no '+++ b/dynamo/…' file in it (paths relative to "
            "site-packages, as `diff -ru` from there writes them)"
        )
    return files


def installed_checkout(files: list[str], out_dir: Path, why: str, site: Path | None = None) -> Path:
    """`out_dir`, laid out like a Dynamo checkout holding the installed packages that `files`
    (site-packages paths, dynamo/<package>/…) lie in, and saying `why` in its PYTHON_ONLY file.
    Raises PatchError naming a package `site` does not hold."""
    site = site or Path(sysconfig.get_paths()["purelib"])
    src = out_dir / "components" / "src"
    (src / "dynamo").mkdir(parents=True, exist_ok=True)
    for package in sorted({"/".join(f.split("/")[:2]) for f in files}):
        installed = site / package
        if not installed.is_dir():
            raise PatchError(f"{why}: needs {package}, which {site} does not hold")
        shutil.copytree(installed, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    (out_dir / PYTHON_ONLY).write_text(why + "\n")
    return out_dir


def patched_checkout(patch: Path, out_dir: Path, site: Path | None = None) -> Path:
    """`out_dir`, laid out like a Dynamo checkout holding the patched packages."""
    why = f"the installed ai-dynamo with {patch.name} applied"
    installed_checkout(touched_files(patch), out_dir, why, site)
    src = out_dir / "components" / "src"
    done = subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "-d", str(src), "-i", str(patch.resolve())],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise PatchError(
            f"{patch}: does not apply to the installed ai-dynamo: "
            f"{(done.stdout + done.stderr).strip()[-400:]}"
        )
    return out_dir


def patched_once(patch: Path, site: Path | None = None) -> Path:
    """The patched checkout of `patch` on the installed packages, built once under the runs
    directory and shared by every launch that asks for it (a case's `cpu_dynamo_patch`); kept,
    like the runs' logs, so a run can be read back."""
    site = site or Path(sysconfig.get_paths()["purelib"])
    digest = hashlib.sha256(patch.read_bytes() + str(site).encode()).hexdigest()[:12]
    out = runs_dir() / "dynamo-patched" / f"{patch.stem}-{digest}"
    if (out / PYTHON_ONLY).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    patched_checkout(patch, built, site)
    try:
        built.rename(out)
    except OSError:  # another process built it first
        shutil.rmtree(built, ignore_errors=True)
    return out
