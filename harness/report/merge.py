"""Merging the results files of N shards into one run: every case once, and (where the shards
left manifests) every case the selection held has a result in some file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class MergeError(ValueError):
    """Shards that do not add up: a case in two files, or a case no shard reported."""


def manifest_path(results: Path) -> Path:
    """runs/results-2.jsonl -> runs/results-2.shard.json (written by `pytest --shard K/N`)."""
    return results.with_suffix(".shard.json")


def merge_results(runs: list[tuple[Path, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One list of results from several files; raises MergeError naming the case and files."""
    seen: dict[str, Path] = {}
    merged: list[dict[str, Any]] = []
    problems: list[str] = []
    for path, results in runs:
        for result in results:
            test_id = result["test_id"]
            if test_id in seen:
                problems.append(f"{test_id} is in both {seen[test_id]} and {path}")
                continue
            seen[test_id] = path
            merged.append(result)
    expected: dict[str, str] = {}
    for path, _ in runs:
        manifest = manifest_path(path)
        if manifest.is_file():
            shards = json.loads(manifest.read_text())["shards"]
            for index, ids in enumerate(shards, start=1):
                for test_id in ids:
                    expected[test_id] = f"shard {index}/{len(shards)}"
    problems += [
        f"{test_id} ({where}) has a result in no file"
        for test_id, where in expected.items()
        if test_id not in seen
    ]
    if problems:
        raise MergeError("; ".join(problems))
    return merged
