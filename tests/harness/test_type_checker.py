"""The type checker the self-test runs (mypy, strict, pyproject.toml) holds the contracts it is
there for: a copy of harness/ with a protocol member taken away fails it, naming the class."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT

MYPY = Path(sys.executable).with_name("mypy")

pytestmark = pytest.mark.skipif(not MYPY.is_file(), reason="mypy is not in this venv")


def checked(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MYPY), "--cache-dir", str(tree / ".mypy_cache")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def copy_of_harness(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    # pyproject.toml's [tool.mypy] files, and tests/, which some benchmarks import from
    for checked_dir in ("harness", "bench", "tests"):
        shutil.copytree(
            REPO_ROOT / checked_dir,
            tree / checked_dir,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(REPO_ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def without(path: Path, text: str) -> None:
    source = path.read_text()
    assert text in source, f"{path}: {text!r} not found"
    path.write_text(source.replace(text, ""))


@pytest.mark.parametrize(
    ("module", "member", "named"),
    [
        # a deployment that cannot say which ports its roles got: Topology[Deployed] refused
        (
            "harness/topology/deployments.py",
            "    def received_ports(self) -> dict[str, int]:\n        return {}\n",
            '"Deployed"',
        ),
        # the topology stops being a RunningTopology: the case loop cannot hold a request
        (
            "harness/topology/topology.py",
            "    def held_chat(self, body: dict[str, Any]) -> HeldRequest:",
            "RunningTopology",
        ),
    ],
    ids=["deployment", "running-topology"],
)
def test_a_class_that_stops_implementing_its_protocol_fails(
    tmp_path: Path, module: str, member: str, named: str
) -> None:
    tree = copy_of_harness(tmp_path)
    assert checked(tree).returncode == 0  # the copy as it is passes
    without(tree / module, member)
    broken = checked(tree)
    assert broken.returncode == 1, broken.stdout
    assert named in broken.stdout, broken.stdout
