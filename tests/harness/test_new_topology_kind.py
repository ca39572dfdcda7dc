"""A new topology kind needs a profile and a launcher and nothing else
(docs/explanation/architecture.md, "add a topology kind"): here `agg_twin`, two aggregated workers
behind the frontend's round-robin router, written in a temp dir and run on the CPU tier with every
oracle, the replicas counted as one group by the path oracle and the case spread over both."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.session import CaseSession
from harness.core.paths import REPO_ROOT
from harness.oracles.answer import JudgeSettings
from harness.payloads.chat import MediaURLs
from harness.profiles import load_profile

LAUNCHER = """#!/usr/bin/env bash
# agg_twin: two aggregated workers behind the frontend's round-robin router.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
FRONTEND_ARGS=(--router-mode round-robin)
begin_topology "$@"
DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT1 8081) start_role twin1 python3 -m dynamo.vllm \\
  --model "$MODEL" --enable-multimodal --gpu-memory-utilization 0.4
DYN_SYSTEM_PORT=$(port DYN_SYSTEM_PORT2 8082) start_role twin2 python3 -m dynamo.vllm \\
  --model "$MODEL" --enable-multimodal --gpu-memory-utilization 0.4
wait_any_exit
"""

PROFILE = """
name: agg_twin_qwen3-vl-2b
topology: agg_twin
stack: dynamo-vllm
launcher: LAUNCHER_PATH
model: {short_name: qwen3-vl-2b, gpu: Qwen/Qwen3-VL-2B-Instruct, cpu: qwen3_vl}
roles:
  - {name: twin1, kind: worker, health_port: DYN_SYSTEM_PORT1, discovery_component: backend}
  - {name: twin2, kind: worker, health_port: DYN_SYSTEM_PORT2, discovery_component: backend}
replicas: [twin1, twin2]
marks: [post_merge]
gpu: {gpus: 1, budget: {total_s: 600, register_s: 480}}
cpu: {budget: {total_s: 240, register_s: 150}}
cases:
  - prompt: "What colour is the square in this image? Respond with only the colour."
    media: [image_url]
    repeat: 2
"""


@pytest.mark.heavy
@pytest.mark.vllm
def test_a_new_kind_from_a_profile_and_a_launcher_runs_on_cpu(
    tmp_path: Path, urls: MediaURLs
) -> None:
    shutil.copytree(REPO_ROOT / "launchers" / "lib", tmp_path / "lib")
    launcher = tmp_path / "agg_twin.sh"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    (tmp_path / "agg_twin.yaml").write_text(PROFILE.replace("LAUNCHER_PATH", str(launcher)))
    profile = load_profile(tmp_path / "agg_twin.yaml", tmp_path)
    sc = ServeCase(profile, profile.cases[0], "cpu")
    record = CaseRecord()
    with CaseSession(urls, JudgeSettings(engine_alone=False)) as cases:
        checks = cases.run(sc, record).checks
    assert [r.name for r in profile.roles] == ["frontend", "event_broker", "twin1", "twin2"]
    assert checks.count("path twin1|twin2 +1") == 2, checks
    assert any(c.startswith("matches the model's own answer: identical") for c in checks)
    assert checks[-1].startswith("spread over the replicas: twin1 +"), checks[-1]
    assert "twin2 +0" not in checks[-1]
    assert record.verdicts and all(read >= 1 for status, read in record.verdicts)
