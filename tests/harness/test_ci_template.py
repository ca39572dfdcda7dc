"""docs/ci/gpu-serve-shards.yml, run for real on the CPU tier: both shards' commands as the
workflow writes them (N=2, a small selection), then its merge step; the merged report holds
exactly the cases an unsharded run of the same selection collects."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.core.paths import REPO_ROOT

TEMPLATE = REPO_ROOT / "docs" / "ci" / "gpu-serve-shards.yml"
# two units of one launch each (LLaVA's agg and E/P/D are judged on their own): a case per shard
# Two launches through the main command as CI runs it: a vLLM and an SGLang aggregated one (CI
# runs no full serve suite: .ci/run), plus a case the CPU tier skips (its row is merged too).
SELECTION = [
    "--ids",
    "mm_agg_llava-1.5-7b,mm_sglang_agg_qwen3-vl-2b,mm_xpu_epd_qwen3-vl-2b",
    "--tier",
    "cpu",
]


def step(job: dict, name_part: str) -> str:
    return next(s["run"] for s in job["steps"] if name_part in s.get("name", ""))


def expand(command: str, shard: int, count: int, runs: Path) -> str:
    command = command.replace("${{ matrix.shard }}", str(shard))
    command = command.replace("${{ env.SHARDS }}", str(count))
    assert "${{" not in command, command
    return re.sub(r"(?<![\w/])runs/", f"{runs}/", command)


def test_the_template_is_a_two_job_matrix_with_a_merge() -> None:
    workflow = yaml.safe_load(TEMPLATE.read_text())
    jobs = workflow["jobs"]
    assert jobs["shard"]["strategy"]["matrix"]["shard"] == list(
        range(1, workflow["env"]["SHARDS"] + 1)
    )
    assert jobs["merge"]["needs"] == "shard" and jobs["merge"]["if"] == "always()"
    assert "--shard ${{ matrix.shard }}/${{ env.SHARDS }}" in step(jobs["shard"], "serve suite")


@pytest.mark.heavy
def test_both_shards_then_the_merge_give_the_unsharded_set(tmp_path: Path) -> None:
    jobs = yaml.safe_load(TEMPLATE.read_text())["jobs"]
    runs = tmp_path / "runs"
    runs.mkdir()
    for shard in (1, 2):
        command = expand(step(jobs["shard"], "serve suite"), shard, 2, runs)
        done = subprocess.run(
            [
                "bash",
                "-c",
                f"{command} -p no:cacheprovider " + " ".join(f"'{a}'" for a in SELECTION),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert f"serve-harness shard {shard}/2:" in done.stdout
    merge = expand(step(jobs["merge"], "one report"), 0, 2, runs)
    merge = merge.replace("scripts/bootstrap.sh", str(REPO_ROOT / "scripts" / "bootstrap.sh"))
    done = subprocess.run(
        ["bash", "-c", merge], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    merged = [json.loads(line) for line in (runs / "results.jsonl").read_text().splitlines()]
    shard_ids = [r["test_id"] for r in merged]
    collect = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "tests/serve", "-m", "post_merge"),
            *("--collect-only", "-q", "-p", "no:cacheprovider"),
            *SELECTION,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    unsharded = re.findall(r"test_serve\[([^\]]+)\]", collect.stdout)
    assert sorted(shard_ids) == sorted(unsharded) and len(shard_ids) == len(set(shard_ids))
    junit = (runs / "junit-merged.xml").read_text()
    assert all(f'name="{tid}"' in junit for tid in unsharded)
    assert sorted(unsharded) == sorted(SELECTION[1].split(","))
    outcomes = {r["test_id"]: r["outcome"] for r in merged}
    assert outcomes == {
        "mm_agg_llava-1.5-7b": "passed",
        "mm_sglang_agg_qwen3-vl-2b": "passed",
        "mm_xpu_epd_qwen3-vl-2b": "skipped",
    }
    report = (runs / "report.md").read_text()
    assert all(f"| {tid} |" in report for tid in unsharded)
