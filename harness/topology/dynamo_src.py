"""The user's Dynamo: a checkout whose Python every role runs in place of the installed wheel's.

`dynamo` is a namespace package: with `<checkout>/components/src` ahead of site-packages on a
role's path, `dynamo.vllm`, `dynamo.frontend`, `dynamo.sglang`, … come from the checkout while
`dynamo._core` (the Rust bindings) still comes from the installed ai-dynamo-runtime wheel. The
checkout's pyproject.toml pins the runtime it was written against; another one is refused.

Proven, not assumed: the harness puts `role_site/sitecustomize.py` first on every role's path,
which records the file each `dynamo.<package>` loads from (`import_records`), and readiness
fails `launcher_invalid` naming a role whose engine package did not come from the checkout."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from harness.core.paths import REPO_ROOT

DYNAMO_SRC_ENV = "HARNESS_DYNAMO_SRC"
CHECKOUT_LAUNCHER = REPO_ROOT / "launchers" / "lib" / "dynamo_src_launcher.sh"
ROLE_ADAPTER = Path(__file__).parent / "role_adapter.py"
IMPORT_RECORDS_ENV = "HARNESS_IMPORT_RECORDS"
ROLE_SITE = Path(__file__).parent / "role_site"
RUNTIME = "ai-dynamo-runtime"


class DynamoSourceError(ValueError):
    """A checkout that cannot be the system under test; the message says which file and why."""


@dataclass(frozen=True)
class DynamoSource:
    root: Path

    @property
    def python_dir(self) -> Path:
        return self.root / "components" / "src"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DynamoSource | None:
        value = (os.environ if environ is None else environ).get(DYNAMO_SRC_ENV)
        return cls(Path(value).resolve()) if value else None

    def check(self, installed_runtime: str | None = None) -> None:
        """Raise DynamoSourceError unless this is a Dynamo checkout the installed runtime serves."""
        if not (self.python_dir / "dynamo").is_dir():
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: no components/src/dynamo there (a Dynamo checkout "
                "keeps its Python packages in components/src/dynamo)"
            )
        wanted = self.runtime_requirement()
        have = installed_runtime or _installed(RUNTIME)
        if wanted is not None and (have is None or not wanted.specifier.contains(have, True)):
            raise DynamoSourceError(
                f"--dynamo-src {self.root}: its pyproject.toml needs {wanted}, the installed "
                f"{RUNTIME} is {have or 'missing'}: its Python would run against Rust bindings "
                f"it was not written for; install {wanted} in this venv or check out a branch "
                f"on {RUNTIME}=={have}"
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
            *([base_pythonpath] if base_pythonpath else []),
        ]
        return {
            "PYTHONPATH": os.pathsep.join(path),
            IMPORT_RECORDS_ENV: str(import_records_dir(log_dir)),
            DYNAMO_SRC_ENV: str(self.root),
        }

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


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
