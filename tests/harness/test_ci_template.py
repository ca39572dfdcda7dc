"""docs/ci/gpu-serve-shards.yml, run for real on the CPU tier: both shards' commands as the
workflow writes them (N=2, a small selection), then its merge step; the merged report holds
exactly the cases an unsharded run of the same selection collects."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.core.paths import REPO_ROOT

TEMPLATE = REPO_ROOT / "docs" / "ci" / "gpu-serve-shards.yml"
# Per stack, as the template's matrix splits them: a vLLM and an SGLang aggregated launch (CI
# runs no full serve suite: .ci/run), plus a case the CPU tier skips (its row is merged too).
SELECTIONS = {
    "vllm": "mm_agg_llava-1.5-7b,mm_xpu_epd_qwen3-vl-2b",
    "sglang": "mm_sglang_agg_qwen3-vl-2b",
}


def step(job: dict, name_part: str) -> str:
    return next(s["run"] for s in job["steps"] if name_part in s.get("name", ""))


def expand(command: str, shard: int, count: int, runs: Path, stack: str = "") -> str:
    command = command.replace("${{ matrix.shard }}", str(shard))
    command = command.replace("${{ matrix.stack }}", stack)
    command = command.replace("${{ env.SHARDS }}", str(count))
    assert "${{" not in command, command
    return re.sub(r"(?<![\w/])runs/", f"{runs}/", command)


def test_the_template_is_a_stack_by_shard_matrix_with_a_merge() -> None:
    workflow = yaml.safe_load(TEMPLATE.read_text())
    jobs = workflow["jobs"]
    matrix = jobs["shard"]["strategy"]["matrix"]
    assert matrix["shard"] == list(range(1, workflow["env"]["SHARDS"] + 1))
    assert matrix["stack"] == ["vllm", "sglang"]
    assert jobs["merge"]["needs"] == "shard" and jobs["merge"]["if"] == "always()"
    assert "--shard ${{ matrix.shard }}/${{ env.SHARDS }}" in step(jobs["shard"], "serve suite")
    assert all("timeout-minutes" in job for job in jobs.values())


@pytest.mark.heavy
def test_both_stacks_shards_then_the_merge_give_the_unsharded_set(tmp_path: Path) -> None:
    jobs = yaml.safe_load(TEMPLATE.read_text())["jobs"]
    runs = tmp_path / "runs"
    runs.mkdir()
    for stack, ids in SELECTIONS.items():
        for shard in (1, 2):
            command = expand(step(jobs["shard"], "serve suite"), shard, 2, runs, stack)
            done = subprocess.run(
                ["bash", "-c", f"{command} -p no:cacheprovider --tier cpu --ids {ids}"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
            assert f"serve-harness shard {shard}/2:" in done.stdout
    # the merge as written, its venv holding requirements/report.txt only (no engine)
    merge = expand(step(jobs["merge"], "one report"), 0, 2, runs).replace(
        "/tmp/report", str(tmp_path / "report")
    )
    done = subprocess.run(
        ["bash", "-c", merge], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = subprocess.run(
        [str(tmp_path / "report" / "bin" / "python"), "-m", "pip", "list"],
        capture_output=True,
        text=True,
    ).stdout
    assert "pydantic" in installed and "vllm" not in installed and "torch" not in installed
    merged = [
        json.loads(line)
        for path in sorted(runs.glob("results-*-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    shard_ids = [r["test_id"] for r in merged]
    wanted = sorted(i for ids in SELECTIONS.values() for i in ids.split(","))
    assert sorted(shard_ids) == wanted and len(shard_ids) == len(set(shard_ids))
    junit = (runs / "junit-merged.xml").read_text()
    assert all(f'name="{tid}"' in junit for tid in wanted)
    outcomes = {r["test_id"]: r["outcome"] for r in merged}
    assert outcomes == {
        "mm_agg_llava-1.5-7b": "passed",
        "mm_sglang_agg_qwen3-vl-2b": "passed",
        "mm_xpu_epd_qwen3-vl-2b": "skipped",
    }
    report = (runs / "report.md").read_text()
    assert all(f"| {tid} |" in report for tid in wanted)
