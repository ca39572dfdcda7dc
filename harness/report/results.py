"""Results files read back: ``results.jsonl`` loaded, validated, and shards' files merged.

- `load_results`, `schema_problems`: reading ``results.jsonl`` (one result object per line) and
  validating it against the schema (harness/core/result_schema.py), with errors that name
  ``file:line`` and the offending field.
- `latest_results`: a file several runs appended to (the suite appends), read as its latest
  result per id, each naming the run it came from.
- `merge_results`: the results files of N shards merged into one run: every case once, and
  (where the shards left manifests) every case the selection held has a result in some file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.core.result_schema import ResultLine

FAILING_OUTCOMES = ("failed", "error")


class ResultsFileError(ValueError):
    """A results.jsonl line that is not valid JSON or breaks the schema."""


def schema_problems(result: object) -> list[str]:
    """Every schema violation of one result (core/result_schema.py `ResultLine`), e.g.
    ``["field 'tier': Input should be 'cpu' or 'gpu', got 'tpu'"]``; empty when valid."""
    if not isinstance(result, dict):
        return [f"expected a JSON object, got {type(result).__name__}"]
    try:
        ResultLine.model_validate(result)
    except ValidationError as invalid:
        return [
            f"field {'.'.join(str(part) for part in error['loc'])!r}: "
            + (
                "missing"
                if error["type"] == "missing"
                else f"{error['msg']}, got {error['input']!r:.80}"
            )
            for error in invalid.errors()
        ]
    return []


def load_results(path: Path | str) -> list[dict[str, Any]]:
    """Results of a results.jsonl file in file order; blank lines are skipped.

    Raises ResultsFileError naming the first bad line, e.g.
    ``runs/a/results.jsonl:3: field 'outcome': expected one of passed, failed, skipped, error,
    got 'ok'``.
    """
    path = Path(path)
    results: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                result = json.loads(line)
            except json.JSONDecodeError as error:
                raise ResultsFileError(f"{path}:{line_number}: not valid JSON: {error}") from None
            problems = schema_problems(result)
            if problems:
                raise ResultsFileError(f"{path}:{line_number}: {'; '.join(problems)}")
            results.append(result)
    return results


def run_of(result: dict[str, Any]) -> str:
    """The run a result came from: its session, else (a line from before sessions were
    written) the session directory of its logs, else when it was written."""
    if result.get("session"):
        return str(result["session"])
    run_dir = result.get("run_dir")
    if run_dir:
        return Path(run_dir).parent.name
    return str(result.get("started_at", ""))[:19]


def latest_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last result of each id in file order (runs append), in the order ids first came."""
    last: dict[str, dict[str, Any]] = {}
    for result in results:
        last.pop(result["test_id"], None)
        last[result["test_id"]] = result
    return list(last.values())


SHOWN_IDS = 3  # of the ids an overlap names in its one line


class MergeError(ValueError):
    """Shards that do not add up: a case in two files, or a case no shard reported."""


def manifest_path(results: Path) -> Path:
    """runs/results-2.jsonl -> runs/results-2.shard.json (written by `pytest --shard K/N`)."""
    return results.with_suffix(".shard.json")


def merge_results(runs: list[tuple[Path, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One list of results from several files, each file read as its latest result per id;
    raises MergeError, in one short line, where an id is in two files (a true overlap of
    shards) or a shard's manifest names one no file holds."""
    seen: dict[str, Path] = {}
    merged: list[dict[str, Any]] = []
    problems: list[str] = []
    overlap: list[str] = []
    for path, results in runs:
        for result in latest_results(results):
            test_id = result["test_id"]
            if test_id in seen:
                overlap.append(test_id)
                continue
            seen[test_id] = path
            merged.append(result)
    if overlap:
        shown = ", ".join(overlap[:SHOWN_IDS]) + (", …" if len(overlap) > SHOWN_IDS else "")
        problems.append(f"{len(overlap)} id(s) in more than one file ({shown})")
    expected: dict[str, str] = {}
    for path, _ in runs:
        manifest = manifest_path(path)
        if manifest.is_file():
            shards = json.loads(manifest.read_text())["shards"]
            for index, ids in enumerate(shards, start=1):
                for test_id in ids:
                    expected[test_id] = f"shard {index}/{len(shards)}"
    absent = [f"{t} ({where})" for t, where in expected.items() if t not in seen]
    if absent:
        shown = ", ".join(absent[:SHOWN_IDS]) + (", …" if len(absent) > SHOWN_IDS else "")
        problems.append(f"{len(absent)} id(s) a manifest names have a result in no file ({shown})")
    if problems:
        raise MergeError("; ".join(problems))
    return merged
