"""Results files read back: ``results.jsonl`` loaded, validated, and shards' files merged.

- `load_results`, `schema_problems`: reading ``results.jsonl`` (one result object per line) and
  validating it against the schema (harness/core/result_schema.py), with errors that name
  ``file:line`` and the offending field.
- `merge_results`: the results files of N shards merged into one run: every case once, and
  (where the shards left manifests) every case the selection held has a result in some file."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.core.result_schema import REQUIRED

TIERS = ("cpu", "gpu")
OUTCOMES = ("passed", "failed", "skipped", "error")
FAILING_OUTCOMES = ("failed", "error")


class ResultsFileError(ValueError):
    """A results.jsonl line that is not valid JSON or breaks the schema."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_iso8601(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _string(value: object) -> str | None:
    return None if isinstance(value, str) else "expected a string"


def _non_empty_string(value: object) -> str | None:
    return None if isinstance(value, str) and value else "expected a non-empty string"


def _one_of(choices: tuple[str, ...]) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        return None if value in choices else f"expected one of {', '.join(choices)}"

    return check


def _optional_string(value: object) -> str | None:
    return None if value is None or isinstance(value, str) else "expected a string or null"


def _seconds(value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return None
    return "expected a number of seconds >= 0"


def _optional_seconds(value: object) -> str | None:
    return None if value is None else _seconds(value)


def _phases(value: object) -> str | None:
    if not isinstance(value, dict):
        return "expected an object {phase_name: seconds}"
    for name, seconds in value.items():
        if _seconds(seconds):
            return f"phase {name!r}: expected a number of seconds >= 0"
    return None


def _timeline(value: object) -> str | None:
    if not isinstance(value, list):
        return "expected a list of {role, t, state}"
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            return f"entry {index}: expected an object {{role, t, state}}"
        if not isinstance(entry.get("role"), str) or not entry["role"]:
            return f"entry {index}.role: expected a non-empty string"
        if not _is_number(entry.get("t")):
            return f"entry {index}.t: expected a number of seconds"
        if not isinstance(entry.get("state"), str):
            return f"entry {index}.state: expected a string"
    return None


def _iso8601(value: object) -> str | None:
    return None if _is_iso8601(value) else "expected an ISO 8601 timestamp string"


FIELD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "test_id": _non_empty_string,
    "profile": _string,
    "case": _string,
    "tier": _one_of(TIERS),
    "stack": _string,
    "launcher": _string,
    "model": _string,
    "outcome": _one_of(OUTCOMES),
    "cause": _optional_string,
    "message": _string,
    "ready_s": _optional_seconds,
    "duration_s": _seconds,
    "phases": _phases,
    "timeline": _timeline,
    "started_at": _iso8601,
}


if tuple(FIELD_CHECKS) != REQUIRED:  # one schema: harness/core/result_schema.py
    raise AssertionError(f"FIELD_CHECKS {tuple(FIELD_CHECKS)} != the schema's required {REQUIRED}")


def schema_problems(result: object) -> list[str]:
    """Every schema violation of one result, e.g. ``["field 'tier': expected one of cpu, gpu,
    got 'tpu'"]``; empty when valid. Fields beyond the contract are allowed."""
    if not isinstance(result, dict):
        return [f"expected a JSON object, got {type(result).__name__}"]
    problems = []
    for field, check in FIELD_CHECKS.items():
        if field not in result:
            problems.append(f"field {field!r}: missing")
            continue
        problem = check(result[field])
        if problem:
            problems.append(f"field {field!r}: {problem}, got {result[field]!r:.80}")
    return problems


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
