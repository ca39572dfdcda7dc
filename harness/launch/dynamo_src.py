"""The user's Dynamo: a checkout whose Python every role runs in place of the installed wheel's.

`dynamo` is a namespace package: with `<checkout>/components/src` ahead of site-packages on a
role's path, `dynamo.vllm`, `dynamo.frontend`, `dynamo.sglang`, … come from the checkout while
`dynamo._core` (the Rust bindings) comes from an ai-dynamo-runtime. The checkout's pyproject.toml
pins the runtime it was written against (`with_runtime`): the installed one where it matches;
else the user's own environment where they built it (`--dynamo-python`, or the active
virtualenv), whose interpreter then runs the roles; else the pinned version from the package
index, unpacked into a cache directory on every role's path (harness/machine/runtime_overlay.py).
Only where none of these serves the pin is the checkout refused, naming both ways.

Proven, not assumed: the harness puts `role_site/sitecustomize.py` first on every role's path,
which records the file each `dynamo.<package>` loads from (`import_records`), and readiness
fails `launcher_invalid` naming a role whose engine package did not come from the checkout."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from harness.core.paths import REPO_ROOT
from harness.core.role_contract import IMPORT_RECORDS_ENV
from harness.machine.runtime_overlay import (
    RuntimeUnavailable,
    pinned_runtime,
    runtime_version_at,
    runtime_version_of,
)

DYNAMO_SRC_ENV = "HARNESS_DYNAMO_SRC"
DYNAMO_PYTHON_ENV = "HARNESS_DYNAMO_PYTHON"  # the user's interpreter, with the runtime it pins
RUNTIME_DIR_ENV = "HARNESS_DYNAMO_RUNTIME_DIR"  # the pinned runtime from the index, on the path
CHECKOUT_LAUNCHER = REPO_ROOT / "launchers" / "lib" / "dynamo_src_launcher.sh"
ROLE_ADAPTER = Path(__file__).parent / "role_adapter.py"
ROLE_SITE = Path(__file__).parent / "role_site"
RUNTIME = "ai-dynamo-runtime"


# A tree that carries Dynamo's Python and no launchers says so in this file, with why
# (harness/launch/dynamo_patch.py writes it into the checkout it patches): its launches run
# ours (launch_spec.choose_launcher), and say so.
PYTHON_ONLY = ".serve-harness-python-only"


class DynamoSourceError(ValueError):
    """A checkout that cannot be the system under test; the message says which file and why."""


@dataclass(frozen=True)
class DynamoSource:
    root: Path
    python: Path | None = None  # the user's interpreter that runs the roles (--dynamo-python)
    runtime_dir: Path | None = None  # the pinned runtime from the index, on every role's path

    @property
    def python_dir(self) -> Path:
        return self.root / "components" / "src"

    def runtime_version(self) -> str | None:
        """The ai-dynamo-runtime the roles will import: the overlay's, the user's, or ours."""
        if self.runtime_dir is not None:
            return runtime_version_at(self.runtime_dir)
        if self.python is not None:
            return runtime_version_of(self.python)
        return _installed(RUNTIME)

    def check(self, installed_runtime: str | None = None) -> None:
        """Raise DynamoSourceError unless this is a Dynamo checkout whose pinned runtime the
        roles will import."""
        self.check_layout()
        wanted = self.runtime_requirement()
        have = installed_runtime or self.runtime_version()
        if wanted is not None and (have is None or not wanted.specifier.contains(have, True)):
            where = f"{self.python}'s" if self.python else "the installed"
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: its pyproject.toml needs {wanted}, {where} {RUNTIME} "
                f"is {have or 'missing'}: its Python would run against Rust bindings it was "
                f"not written for. {self.both_ways(wanted)}"
            )

    def both_ways(self, wanted: Requirement, index: str | None = None) -> str:
        """The two ways to run a checkout on the runtime it pins, each with its command."""
        index_way = (
            f"not possible here: {index}"
            if index
            else f"without --dynamo-python, the harness fetches {wanted} itself into a cached "
            "directory on every role's path"
        )
        return (
            f"Either (1) run it in your own environment, where you built {RUNTIME} from this "
            f"checkout with its engine installed: `scripts/serve-suite --dynamo-src {self.root} "
            f"--dynamo-python /path/to/venv/bin/python` (or activate that virtualenv first); or "
            f"(2) the pinned runtime from the package index: {index_way}"
        )

    def with_runtime(
        self, python: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> DynamoSource:
        """This source with what serves its pinned runtime: `python` (the user's, checked), the
        installed runtime where it matches, the active virtualenv's interpreter where it has
        the pin, else the pinned runtime from the index. Raises DynamoSourceError naming both
        ways when none serves it."""
        if python is not None:
            chosen = dataclasses.replace(self, python=python.absolute())
            chosen.check()
            return chosen
        self.check_layout()
        wanted = self.runtime_requirement()
        if wanted is None or _serves(wanted, _installed(RUNTIME)):
            return self
        active = active_virtualenv(os.environ if environ is None else environ)
        if active is not None and _serves(wanted, runtime_version_of(active)):
            return dataclasses.replace(self, python=active)
        pinned = _pinned_version(wanted)
        if pinned is None:
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: its pyproject.toml needs {wanted}, the installed "
                f"{RUNTIME} is {_installed(RUNTIME)}. "
                + self.both_ways(wanted, f"{wanted} names no single version to fetch")
            )
        try:
            return dataclasses.replace(self, runtime_dir=pinned_runtime(pinned))
        except (RuntimeUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: its pyproject.toml needs {wanted}, the installed "
                f"{RUNTIME} is {_installed(RUNTIME)}. " + self.both_ways(wanted, str(exc))
            ) from None

    def check_layout(self) -> None:
        if not self.root.is_dir():
            raise DynamoSourceError(f"--dynamo-src {self.root}: no such directory")
        if not (self.python_dir / "dynamo").is_dir():
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: no components/src/dynamo there (a Dynamo checkout "
                "keeps its Python packages in components/src/dynamo)"
            )

    def runtime_requirement(self) -> Requirement | None:
        """The ai-dynamo-runtime the checkout's pyproject.toml pins (None: it names none)."""
        pyproject = self.root / "pyproject.toml"
        if not pyproject.is_file():
            return None
        try:
            project = tomllib.loads(pyproject.read_text()).get("project", {})
        except tomllib.TOMLDecodeError as exc:
            raise DynamoSourceError(f"{pyproject}: not valid TOML: {exc}") from None
        for text in project.get("dependencies", []):
            req = Requirement(text)
            if req.name == RUNTIME:
                return req
        return None

    def env(self, log_dir: Path, base_pythonpath: str | None) -> dict[str, str]:
        """What every role of a launch gets: the recorder, then the checkout, on its path."""
        path = [
            str(ROLE_SITE),
            str(self.python_dir),
            *([str(self.runtime_dir)] if self.runtime_dir else []),
            *([base_pythonpath] if base_pythonpath else []),
        ]
        env = {
            "PYTHONPATH": os.pathsep.join(path),
            IMPORT_RECORDS_ENV: str(import_records_dir(log_dir)),
            DYNAMO_SRC_ENV: str(self.root),
        }
        if self.runtime_dir is not None:
            env[RUNTIME_DIR_ENV] = str(self.runtime_dir)
        if self.python is not None:
            env[DYNAMO_PYTHON_ENV] = str(self.python)
        return env

    def owns(self, file: str | None) -> bool:
        return file is not None and Path(file).resolve().is_relative_to(self.python_dir)

    def in_checkout(self, module: str) -> bool:
        """The checkout carries this `dynamo.<package>` (so it must be the one loaded)."""
        relative = Path(*module.split("."))
        base = self.python_dir / relative
        return base.is_dir() or base.with_suffix(".py").is_file()


def import_records_dir(log_dir: Path) -> Path:
    return log_dir / "imports"


def import_records(log_dir: Path) -> dict[int, dict[str, str | None]]:
    """{pid: {module: file it was loaded from}} as the roles' recorders wrote them."""
    found: dict[int, dict[str, str | None]] = {}
    records = import_records_dir(log_dir)
    for path in sorted(records.glob("*.jsonl")) if records.is_dir() else []:
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            found.setdefault(int(record["pid"]), {})[record["module"]] = record.get("file")
    return found


def active_virtualenv(environ: Mapping[str, str]) -> Path | None:
    """The interpreter of an activated virtualenv that is not this harness's own."""
    venv = environ.get("VIRTUAL_ENV")
    if not venv:
        return None
    python = Path(venv) / "bin" / "python"
    ours = Path(sys.prefix).resolve()
    return python if python.exists() and Path(venv).resolve() != ours else None


def _serves(wanted: Requirement, version: str | None) -> bool:
    return version is not None and wanted.specifier.contains(version, True)


def _pinned_version(wanted: Requirement) -> str | None:
    """`==X` -> X: the one version a pin names (a range names none to fetch)."""
    specs = list(wanted.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "==="):
        return specs[0].version
    return None


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
