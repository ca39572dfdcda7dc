"""A fault of the mutation catalogue (`profiles/faults.yml`) and the tree it is put into: a copy
of a Dynamo checkout (or of the installed ai-dynamo and our launchers) with that one fault
applied. What `serve-harness mutate` runs the serve suite on; the user's tree is never touched.

An entry names its file in upstream's layout (`components/src/dynamo/vllm/handlers.py`,
`examples/backends/vllm/launch/agg_multimodal.sh`) or, for the harness's own launcher library,
in ours (`launchers/lib/common.sh`); the literal text to find there, exactly once, and what to put
in its place; the ids where the faulty code runs; and what a catch must name (causes, role).

Without a checkout the tree is built from what is installed: the package the fault lies in,
copied out of the stack's site-packages (`installed_checkout`), and a copy of our launchers under
`launchers/`, which its launches run (launch_spec.choose_launcher); an upstream launcher path
maps to ours through the profiles' `upstream_launcher`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause
from harness.launch.dynamo_patch import PatchError, installed_checkout
from harness.profiles import Profile

CATALOGUE = REPO_ROOT / "profiles" / "faults.yml"
CHECKOUT_PYTHON = "components/src/"
OUR_LAUNCHERS = "launchers/"
STACKS = {"vllm": "dynamo-vllm", "sglang": "dynamo-sglang"}


class CatalogueError(ValueError):
    """A catalogue that cannot be used; the message names the file, the fault and the field."""


class Catch(BaseModel):
    """What a catch must name: one of `causes`, and one of `roles` (none: any role or none)."""

    model_config = ConfigDict(extra="forbid")
    causes: list[Cause] = Field(min_length=1)
    roles: list[str] = []

    def accepts(self, cause: str | None, role: str | None) -> bool:
        return cause in self.causes and (not self.roles or role in self.roles)

    def __str__(self) -> str:
        causes = " or ".join(c.value for c in self.causes)
        return causes + (f" ({' or '.join(self.roles)})" if self.roles else "")


class Fault(BaseModel):
    """One fault: a literal edit of one file, where it runs, and what must catch it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(pattern=r"^(vllm|sglang)-[a-z0-9-]+$")
    fault_class: str = Field(alias="class", min_length=1)
    stack: Literal["vllm", "sglang"]
    file: str
    find: str = Field(min_length=1)
    replace: str
    ids: list[str] = Field(min_length=1)
    catch: Catch
    why: str = Field(min_length=1)  # the real change this fault stands for
    # Why the CPU tier cannot see it (an escape we know of and say so in `list`), where it can't.
    blind: str | None = None

    @property
    def is_python(self) -> bool:
        return self.file.startswith(CHECKOUT_PYTHON)

    @property
    def site_path(self) -> str:
        """components/src/dynamo/vllm/x.py -> dynamo/vllm/x.py."""
        return self.file.removeprefix(CHECKOUT_PYTHON)


def load_catalogue(path: Path = CATALOGUE) -> list[Fault]:
    try:
        entries = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogueError(f"{path}: {exc}") from None
    if not isinstance(entries, list):
        raise CatalogueError(f"{path}: a list of faults expected")
    faults: list[Fault] = []
    for number, entry in enumerate(entries, 1):
        name = entry.get("name", f"entry {number}") if isinstance(entry, dict) else number
        try:
            faults.append(Fault.model_validate(entry))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise CatalogueError(f"{path}: fault {name}: {problems}") from None
    names = [f.name for f in faults]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise CatalogueError(f"{path}: fault names twice: {', '.join(twice)}")
    return faults


def our_launcher(fault: Fault, profiles: list[Profile]) -> str | None:
    """The repo path of the launcher the fault's file stands for in a tree built from ours."""
    if fault.file.startswith(OUR_LAUNCHERS):
        return fault.file
    return next((p.launcher for p in profiles if p.upstream_launcher == fault.file), None)


def build_tree(
    fault: Fault | None,
    out_dir: Path,
    profiles: list[Profile],
    site: Path,
    checkout: Path | None = None,
) -> tuple[Path, str | None]:
    """The tree a fault runs on, under `out_dir`, and None; or the tree and why the fault does
    not apply ("not applicable: …"), a finding about the catalogue. `fault` None: the tree as
    it is, for the run every fault is measured against."""
    tree = out_dir / "tree"
    if checkout is not None:
        export(checkout, tree)
        target = tree / fault.file if fault else None
    else:
        why = "the installed ai-dynamo and the harness's launchers" + (
            f", with fault {fault.name}" if fault else ""
        )
        try:
            installed_checkout(
                [fault.site_path] if fault and fault.is_python else [], tree, why, site
            )
        except PatchError as exc:
            raise CatalogueError(str(exc)) from None
        shutil.copytree(REPO_ROOT / "launchers", tree / "launchers")
        target = None
        if fault is not None:
            mapped = fault.site_path if fault.is_python else our_launcher(fault, profiles)
            if mapped is None:
                return tree, f"not applicable: no profile's launcher stands for {fault.file}"
            target = tree / ("components/src/" + mapped if fault.is_python else mapped)
    if fault is None or target is None:
        return tree, None
    return tree, apply(fault, target)


def apply(fault: Fault, target: Path) -> str | None:
    """Put the fault into `target`; None when it applied, else why not."""
    if not target.is_file():
        return f"not applicable: no {fault.file} in the tree"
    text = target.read_text()
    count = text.count(fault.find)
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times"
        return f"not applicable: pattern {found} in {fault.file}"
    target.write_text(text.replace(fault.find, fault.replace))
    return None


def export(checkout: Path, out: Path) -> None:
    """The checkout's working tree, committed or not, copied to `out` (its .git left behind):
    what its user would run, unchanged; the checkout itself is only read."""
    if not (checkout / "components" / "src" / "dynamo").is_dir():
        raise CatalogueError(f"--dynamo-src {checkout}: no components/src/dynamo there")
    listed = subprocess.run(
        [
            "git",
            "-C",
            str(checkout),
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
        capture_output=True,
    )
    if listed.returncode != 0:  # not a git tree: all of it
        shutil.copytree(checkout, out, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        return
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = checkout / name
        if source.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out / name)
