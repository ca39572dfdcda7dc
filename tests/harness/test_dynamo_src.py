"""The user's Dynamo as the system under test (`--dynamo-src`): the checkout is checked, every
role's imports are recorded by the harness's sitecustomize, a role that ran other code is named,
and a patch to the installed wheel becomes such a checkout for one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from harness.cli.validate_patch import defect_ids
from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.dynamo_patch import PatchError, patched_checkout, touched_files
from harness.launch.dynamo_src import (
    ROLE_SITE,
    DynamoSource,
    DynamoSourceError,
    import_records,
    import_records_dir,
)
from harness.launch.plan import LaunchPlan, RolePlan
from harness.profiles import Tier, load_profiles
from harness.topology.observed import RunningTopology
from harness.topology.phases import RanDynamoSource

SITE = Path(sysconfig.get_paths()["purelib"])
LLAVA_PATCH = REPO_ROOT / "docs" / "patches" / "dynamo-1.6.1-llava-encoder-feature-layer.patch"


def checkout(root: Path, runtime: str | None = "1.6.1") -> DynamoSource:
    (root / "components" / "src" / "dynamo" / "harness_probe").mkdir(parents=True)
    (root / "components" / "src" / "dynamo" / "harness_probe" / "__init__.py").write_text("")
    if runtime:
        deps = f'dependencies = ["ai-dynamo-runtime=={runtime}", "pyzmq>=26"]'
        (root / "pyproject.toml").write_text(f'[project]\nname = "ai-dynamo"\n{deps}\n')
    return DynamoSource(root)


def test_a_checkout_on_another_runtime_is_refused_naming_both(tmp_path: Path) -> None:
    checkout(tmp_path / "ok").check(installed_runtime="1.6.1")
    with pytest.raises(DynamoSourceError) as refused:
        checkout(tmp_path / "newer", runtime="1.7.0").check(installed_runtime="1.6.1")
    assert "needs ai-dynamo-runtime==1.7.0, the installed ai-dynamo-runtime is 1.6.1" in str(
        refused.value
    )
    with pytest.raises(DynamoSourceError, match="no components/src/dynamo"):
        DynamoSource(tmp_path).check()


def test_each_process_records_where_its_dynamo_packages_came_from(tmp_path: Path) -> None:
    """The checkout's package from the checkout, the wheel's own (not in the checkout) from
    site-packages: namespace merging, recorded at import by the role's sitecustomize."""
    source = checkout(tmp_path / "src")
    env = {**os.environ, **source.env(tmp_path / "logs", None)}
    code = "import dynamo.harness_probe, dynamo.prometheus_names; import os; print(os.getpid())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    records = import_records(tmp_path / "logs")[int(done.stdout)]
    assert source.owns(records["dynamo.harness_probe"])
    assert records["dynamo.prometheus_names"] == str(SITE / "dynamo" / "prometheus_names.py")
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(ROLE_SITE), str(source.python_dir)]


class ObservedLogs(RunningTopology):
    """TEST DOUBLE of a running topology: what RanDynamoSource reads of a launch, its plan's
    roles and log dir, over log files a test writes."""

    def __init__(self, log_dir: Path, source: DynamoSource) -> None:
        roles = (RolePlan("frontend", "frontend", None), RolePlan("decode", "worker", 1))
        self.plan = type("Plan", (), {"dynamo_src": source, "log_dir": log_dir, "roles": roles})

    def failure(self, cause: Cause, message: str, **ev: Any) -> TopologyFailure:
        return TopologyFailure(cause, message)


def observed_logs(log_dir: Path, source: DynamoSource) -> RunningTopology:
    """ObservedLogs where a phase takes the running topology: it has only what this phase reads."""
    return ObservedLogs(log_dir, source)


def write_role(log_dir: Path, role: str, pid: int, module: str, file: str) -> None:
    (log_dir / f"{role}.pid").write_text(f"{pid}\n")
    records = import_records_dir(log_dir)
    records.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"pid": pid, "module": module, "file": file})
    (records / f"{pid}.jsonl").write_text(line + "\n")


def test_a_role_that_ran_the_installed_package_is_named(tmp_path: Path) -> None:
    source = checkout(tmp_path / "src")
    ours = str(source.python_dir / "dynamo" / "harness_probe" / "__init__.py")
    logs = tmp_path / "logs"
    logs.mkdir()
    write_role(logs, "frontend", 101, "dynamo.harness_probe", ours)
    write_role(logs, "decode", 102, "dynamo.harness_probe", str(SITE / "dynamo/x/__init__.py"))
    failure = RanDynamoSource().failure(observed_logs(logs, source), 10.0)
    assert failure is not None and failure.cause == Cause.LAUNCHER_INVALID
    assert failure.message.startswith("role 'decode' (pid 102) did not run the checkout's")
    write_role(logs, "decode", 102, "dynamo.harness_probe", ours)
    assert RanDynamoSource().failure(observed_logs(logs, source), 10.0) is None
    (import_records_dir(logs) / "101.jsonl").unlink()
    failure = RanDynamoSource().failure(observed_logs(logs, source), 10.0)
    assert failure is not None and "'frontend' (pid 101)" in failure.message
    assert "recorded no dynamo import" in failure.message


def test_the_shipped_patch_makes_a_checkout_of_the_installed_wheel(tmp_path: Path) -> None:
    if not (SITE / "dynamo" / "vllm").is_dir():
        pytest.skip("needs the CPU-tier venv (ai-dynamo installed)")
    files = touched_files(LLAVA_PATCH)
    assert files == ["dynamo/vllm/multimodal_utils/encode_utils.py"]
    made = patched_checkout(LLAVA_PATCH, tmp_path / "co")
    fixed = (made / "components/src" / files[0]).read_text()
    assert "hidden_states[layers]" in fixed and "features[:, 1:]" in fixed
    assert "hidden_states[layers]" not in (SITE / files[0]).read_text()  # installed untouched
    profiles = load_profiles(REPO_ROOT / "profiles", REPO_ROOT)
    assert defect_ids(profiles, files) == [
        "mm_e_pd_llava-1.5-7b",
        "mm_e_pd_llava-1.5-7b_b64_frontend_decoding",
        "mm_epd_llava-1.5-7b",
        "mm_epd_llava-1.5-7b_b64_frontend_decoding",
    ]
    with pytest.raises(PatchError, match="does not apply to the installed ai-dynamo"):
        patched_checkout(LLAVA_PATCH, made.parent / "again", site=made / "components" / "src")


def test_a_checkout_launcher_plan_runs_it_behind_the_role_adapter(tmp_path: Path) -> None:
    """Pure plan: the wrapper with the checkout's script, the adapter's env, upstream's managed
    ports, the profile's model first; ours where the checkout lacks upstream's launcher."""
    from harness.audit.capture import fake_ports
    from harness.core.paths import marker_env
    from harness.launch.dynamo_src import CHECKOUT_LAUNCHER
    from harness.launch.launch_spec import LaunchSpec
    from harness.launch.plan import resolve
    from harness.profiles import load_profile

    profile = load_profile(REPO_ROOT / "profiles/vllm/epd_qwen3-vl-2b.yaml", REPO_ROOT)
    source = checkout(tmp_path / "src")
    script = source.root / str(profile.upstream_launcher)
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/bash\n")
    base = dict(os.environ)

    def plan(tier: Tier, under: DynamoSource | None = source) -> LaunchPlan:
        spec = LaunchSpec.of(profile, tier, profile.cases[0], source=under)
        return resolve(
            spec,
            ports=fake_ports(spec, REPO_ROOT),
            run_dir=tmp_path / tier,
            scratch_dir=tmp_path / "s",
            model="m",
            topology_id="t",
            marker_env=marker_env("t", "s", 1),
            base_env=base,
        )

    cpu, gpu = plan("cpu"), plan("gpu")
    assert cpu.launcher == CHECKOUT_LAUNCHER
    assert cpu.args[0] == str(source.root / str(profile.upstream_launcher))
    assert cpu.args[1:3] == ("--model", "Qwen/Qwen3-VL-2B-Instruct-FP8")
    assert json.loads(cpu.env["HARNESS_ROLE_PORTS"]) == {
        "DYN_SYSTEM_PORT1": "encode",
        "DYN_SYSTEM_PORT2": "prefill",
        "DYN_SYSTEM_PORT3": "decode",
    }
    assert cpu.env["DYN_MANAGED_PORTS"] == "1"
    assert cpu.loopback_only and gpu.loopback_only
    ours = plan("cpu", None)
    assert ours.launcher == REPO_ROOT / profile.launcher
