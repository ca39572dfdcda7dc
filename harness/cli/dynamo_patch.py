"""A Dynamo checkout made from the installed ai-dynamo wheel and a patch, for one run only.

The patch is a unified diff whose paths are site-packages paths (`a/dynamo/vllm/…`, as
`diff -ru site-packages/dynamo patched/dynamo` writes them). Every `dynamo.<package>` it touches
is copied out of site-packages into `<dir>/components/src/dynamo/<package>` and patched there
with GNU patch; `--dynamo-src <dir>` then puts it in front of the installed one
(runtime/dynamo_src.py). Nothing installed is modified.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from harness.profiles import Profile

TOUCHED = re.compile(r"^\+\+\+ (?:b/)?(dynamo/\S+)", re.MULTILINE)


class PatchError(ValueError):
    """A patch that cannot make a checkout; the message names the file and why."""


def touched_files(patch: Path) -> list[str]:
    """The site-packages paths the patch changes, e.g. dynamo/vllm/multimodal_utils/model.py."""
    files = TOUCHED.findall(patch.read_text())
    if not files:
        raise PatchError(f"{patch}: no '+++ b/dynamo/…' file in it (paths relative to "
                         "site-packages, as `diff -ru` from there writes them)")  # fmt: skip
    return files


def patched_checkout(patch: Path, out_dir: Path, site: Path | None = None) -> Path:
    """`out_dir`, laid out like a Dynamo checkout holding the patched packages."""
    site = site or Path(sysconfig.get_paths()["purelib"])
    src = out_dir / "components" / "src"
    for package in sorted({"/".join(f.split("/")[:2]) for f in touched_files(patch)}):
        installed = site / package
        if not installed.is_dir():
            raise PatchError(f"{patch}: touches {package}, which {site} does not hold")
        shutil.copytree(installed, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "-d", str(src), "-i", str(patch.resolve())],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise PatchError(f"{patch}: does not apply to the installed ai-dynamo: "
                         f"{(done.stdout + done.stderr).strip()[-400:]}")  # fmt: skip
    return out_dir


def defect_ids(profiles: list[Profile], files: list[str]) -> list[str]:
    """The CPU ids whose declared upstream defect is rooted in one of `files`."""
    return [
        p.test_id(case)
        for p in profiles
        for case in p.cases
        if any(
            r.cpu.known_defect and r.cpu.known_defect.root_cause.file in files
            for r in (case, *case.follow_ups)
        )
    ]
