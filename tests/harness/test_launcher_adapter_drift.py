"""Our launchers and upstream's cannot drift: the same topology through our E/P/D launcher and
through an upstream-style one (upstream main's port contract, tests/harness/dynamo_checkout.py)
comes out of the role adapter with the same argv and the same adapted environment per role, on
both tiers. The adapter runs for real (dry: it records its decisions and starts nothing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness.audit.capture import simulated_gpu_env
from harness.core.paths import REPO_ROOT, marker_env
from harness.core.role_contract import DRY_ENV
from harness.launch.dynamo_src import DYNAMO_SRC_ENV, DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import resolve
from harness.launch.role_adapter import split_args
from harness.profiles import Tier, load_profile
from tests.harness.dynamo_checkout import build_checkout

PROFILE = load_profile(REPO_ROOT / "profiles" / "vllm" / "epd_qwen3-vl-2b.yaml", REPO_ROOT)
WORKERS = ("encode", "prefill", "decode")


def decisions(tier: Tier, tmp: Path, checkout: Path | None) -> dict[str, dict[str, object]]:
    """{role: {"args": normalized flags, "env": what the adapter set}} for one launcher."""
    base = {**os.environ, **(simulated_gpu_env(PROFILE) if tier == "gpu" else {})}
    base.pop(DYNAMO_SRC_ENV, None)
    case = PROFILE.cases[1]  # b64 + --frontend-decoding: every worker gets the flag
    source = DynamoSource(checkout.resolve()) if checkout is not None else None
    spec = LaunchSpec.of(PROFILE, tier, case, source=source)
    ours = LaunchSpec.of(PROFILE, tier, case, source=None)
    names = sorted(set(spec.port_contract.names) | set(ours.port_contract.names))
    ports = {name: 21400 + i for i, name in enumerate(names)}  # the same port per variable
    plan = resolve(
        spec,
        ports=ports,
        run_dir=tmp / "run",
        scratch_dir=tmp / "s",
        model="/tiny/qwen3_vl",
        topology_id="drift",
        base_env=base,
        marker_env=marker_env("drift", "drift", os.getpid()),
    )
    # dry: each role records and exits; the event broker (no role) runs /bin/true
    env = {**plan.env, DRY_ENV: "1", "HARNESS_REAL_PYTHON": "/bin/true"}
    subprocess.run(
        plan.argv,
        env=env,
        capture_output=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
        start_new_session=True,
    )
    found = {}
    for path in sorted(plan.log_dir.glob("*.adapter.json")):
        record = json.loads(path.read_text())
        if record["exec"][:1] != ["-m"]:
            continue  # the event broker: no engine, nothing adapted
        args = [a.replace(str(tmp / "s"), "<scratch>") for a in record["exec"][2:]]
        pairs = sorted(
            (name, json.dumps(json.loads(v), sort_keys=True) if v and v[:1] == "{" else v)
            for name, v in split_args(args)
        )
        found[record["role"]] = {"args": pairs, "env": record["env"], "unset": record["unset"]}
    return found


@pytest.mark.parametrize("tier", ["cpu", "gpu"])
def test_our_launcher_and_upstreams_adapt_to_the_same_roles(tmp_path: Path, tier: Tier) -> None:
    checkout = build_checkout(tmp_path / "dynamo", contract="role_vars")
    ours = decisions(tier, tmp_path / "ours", None)
    theirs = decisions(tier, tmp_path / "theirs", checkout)
    assert set(ours) >= {"frontend", *WORKERS}, ours
    for role in ("frontend", *WORKERS):
        assert ours[role] == theirs[role], (
            f"{tier} {role}:\n ours   {ours[role]}\n theirs {theirs[role]}"
        )
