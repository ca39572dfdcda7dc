"""A checkout that pins another ai-dynamo-runtime than the one installed here runs all the same:
in the user's own environment (`--dynamo-python`, or the active virtualenv), or on the pinned
runtime fetched from the package index into a cached directory; refused only where neither
serves the pin, naming both ways. A second venv stands in for the user's: it sees everything of
this harness's venv (a .pth) and holds its own ai-dynamo-runtime dist-info of another version."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.launch.dynamo_src import DynamoSource, DynamoSourceError
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import load_profile
from harness.topology.topology import launch
from tests.harness.dynamo_checkout import build_checkout
from tests.harness.test_dynamo_src_launch import nothing_left

OTHER = "9.9.9"  # a runtime version the index does not have


def pin(root: Path, requirement: str) -> Path:
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "ai-dynamo"\ndependencies = ["{requirement}"]\n'
    )
    return root


def checkout_dir(root: Path) -> Path:
    (root / "components" / "src" / "dynamo").mkdir(parents=True)
    return root


def users_venv(root: Path, version: str = OTHER) -> Path:
    """A venv standing in for the user's: this harness's site-packages (and its .pth files) plus
    its own ai-dynamo-runtime dist-info at `version`, found first."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    ours = sysconfig.get_paths()["purelib"]
    (site / "zz_harness_venv.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    info = site / f"ai_dynamo_runtime-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: ai-dynamo-runtime\nVersion: {version}\n"
    )
    return root / "bin" / "python"


def test_the_installed_runtime_serves_a_checkout_that_pins_it(tmp_path: Path) -> None:
    from importlib import metadata

    installed = metadata.version("ai-dynamo-runtime")
    source = DynamoSource(pin(checkout_dir(tmp_path), f"ai-dynamo-runtime=={installed}"))
    assert source.with_runtime() == source


def test_the_users_environment_runs_a_checkout_on_another_runtime(tmp_path: Path) -> None:
    root = pin(checkout_dir(tmp_path / "co"), f"ai-dynamo-runtime=={OTHER}")
    python = users_venv(tmp_path / "venv")
    chosen = DynamoSource(root).with_runtime(python)
    assert chosen.python == python.absolute() and chosen.runtime_version() == OTHER
    # the active virtualenv, without the option
    active = DynamoSource(root).with_runtime(environ={"VIRTUAL_ENV": str(tmp_path / "venv")})
    assert active.python == tmp_path / "venv" / "bin" / "python"
    # an environment without the pin is refused, naming both ways
    with pytest.raises(DynamoSourceError) as refused:
        DynamoSource(pin(root, "ai-dynamo-runtime==9.9.8")).with_runtime(python)
    assert f"'s ai-dynamo-runtime is {OTHER}" in str(refused.value)
    assert "--dynamo-python /path/to/venv/bin/python" in str(refused.value)


def test_refused_only_where_neither_way_serves_the_pin(tmp_path: Path) -> None:
    root = pin(checkout_dir(tmp_path), f"ai-dynamo-runtime=={OTHER}")
    with pytest.raises(DynamoSourceError) as refused:
        DynamoSource(root).with_runtime(environ={})
    message = str(refused.value)
    assert "Either (1) run it in your own environment" in message
    assert f"`scripts/serve-suite --dynamo-src {root} --dynamo-python" in message
    assert "(2) the pinned runtime from the package index: not possible here: pip install " in (
        message
    )
    ranged = pin(root, "ai-dynamo-runtime>=9")
    with pytest.raises(DynamoSourceError, match="names no single version to fetch"):
        DynamoSource(ranged).with_runtime(environ={})


@pytest.mark.heavy
def test_the_pinned_runtime_from_the_index_goes_on_every_roles_path(tmp_path: Path) -> None:
    """1.6.0, a version the index has and this venv does not: fetched once, cached."""
    root = pin(checkout_dir(tmp_path), "ai-dynamo-runtime==1.6.0")
    try:
        chosen = DynamoSource(root).with_runtime(environ={})
    except DynamoSourceError as exc:
        if "No matching distribution" in str(exc):
            raise
        pytest.skip(f"the package index does not answer here: {exc}")
    assert chosen.runtime_dir is not None and chosen.runtime_version() == "1.6.0"
    assert (chosen.runtime_dir / "dynamo" / "_core.abi3.so").is_file()
    env = chosen.env(tmp_path / "logs", None)
    seen = subprocess.run(
        [sys.executable, "-c", "import dynamo._core as c, importlib.metadata as m;"
         "print(c.__file__); print(m.version('ai-dynamo-runtime'))"],
        env={"PYTHONPATH": env["PYTHONPATH"], "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    core, version = seen.stdout.split()
    assert core.startswith(str(chosen.runtime_dir)) and version == "1.6.0"


@pytest.mark.heavy
@pytest.mark.cpu
def test_a_launch_runs_every_role_in_the_users_interpreter(tmp_path: Path) -> None:
    root = pin(build_checkout(tmp_path / "dynamo", shapes=True), f"ai-dynamo-runtime=={OTHER}")
    python = users_venv(tmp_path / "venv")
    source = DynamoSource(root).with_runtime(python)
    profile = load_profile(REPO_ROOT / "profiles/vllm/agg_qwen3-vl-2b.yaml", REPO_ROOT)
    with launch(LaunchSpec.of(profile, "cpu", profile.cases[0], source=source)) as topo:
        records = [json.loads(p.read_text()) for p in topo.plan.log_dir.glob("*.adapter.json")]
        ports = list(topo.plan.ports.values())
    engines = {r["role"]: r["python"] for r in records if r["exec"][:2] != ["-m", "harness"]}
    assert {"frontend", "worker"} <= set(engines)
    assert engines["frontend"] == engines["worker"] == str(python.absolute()), records
    nothing_left(topo.plan.topology_id, ports)
