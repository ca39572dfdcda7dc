"""`serve-harness report RESULTS.jsonl`: validation table (Markdown or HTML), optionally an A/B
comparison against another run (`--compare OTHER.jsonl` is the A side, RESULTS the B side). A
file several runs appended to (the suite appends to runs/results.jsonl) is read as the latest
result of each id, naming the runs they came from; `--all` reports every run's."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.cli.main import CliError
from harness.report import (
    MergeError,
    ResultsFileError,
    compare_table,
    html_report,
    junit_xml,
    latest_results,
    load_results,
    merge_results,
    run_of,
    validation_table,
)

ORDER = 60  # its place in `serve-harness --help` (harness/cli/main.py)

EXAMPLES = """examples:
  serve-harness report runs/results.jsonl
  serve-harness report runs/results.jsonl --all
  serve-harness report runs/results.jsonl --compare old/results.jsonl"""


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("report", help="results.jsonl -> validation / A-B tables")
    parser.add_argument(
        "results",
        type=Path,
        nargs="+",
        help="results.jsonl of the run to report (B side); several: the shards of one run, "
        "merged (each case once; with their manifests, every case reported)",
    )
    parser.add_argument("--compare", type=Path, help="results.jsonl of the baseline run (A side)")
    parser.add_argument(
        "--all",
        action="store_true",
        help="every run's results in the file (default: the latest result of each id)",
    )
    parser.add_argument("--format", choices=["md", "html"], default="md")
    parser.add_argument("--title", default="Serve validation", help="HTML page title")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    parser.add_argument("--junit", type=Path, help="also write the (merged) run as JUnit XML")
    parser.add_argument(
        "--durations",
        type=Path,
        metavar="OUT.json",
        help="also write each id's seconds (duration + teardown): the durations a first run's "
        "ETA counts by (profiles/durations-cpu.json)",
    )
    return parser


def read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise CliError(f"no results file at {path}")
    try:
        return load_results(path)
    except ResultsFileError as exc:
        raise CliError(str(exc)) from None


def runs_line(results: list[dict[str, Any]]) -> str:
    """'From 2 runs: 3f2a1c0d9e8b (50 ids, 2026-12-06T00:30), 9bc80f0c6f64 (4 ids, …)'."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        runs.setdefault(run_of(result), []).append(result)
    each = ", ".join(
        f"{run} ({len(rows)} id(s), {min(str(r['started_at'])[:16] for r in rows)})"
        for run, rows in runs.items()
    )
    return f"From {len(runs)} run(s): {each}"


def render(
    results: list[dict[str, Any]], baseline: list[dict[str, Any]] | None, fmt: str, title: str
) -> str:
    if fmt == "html":
        return html_report(results, title=title, baseline=baseline)
    parts = [f"# {title}", "", runs_line(results), "", validation_table(results, fmt="md")]
    if baseline is not None:
        parts += ["", "## A/B (A = baseline, B = this run)", "", compare_table(baseline, results)]
    return "\n".join(parts) + "\n"


def run(args: argparse.Namespace) -> int:
    files = [(path, read(path)) for path in args.results]
    try:
        if args.all:
            results = [result for _, rows in files for result in rows]
        else:
            results = merge_results(files)
    except MergeError as exc:
        raise CliError(f"the shards do not add up: {exc}") from None
    if args.junit:
        args.junit.parent.mkdir(parents=True, exist_ok=True)
        args.junit.write_text(junit_xml(results), encoding="utf-8")
    if args.durations:
        seconds = {
            r["test_id"]: round(float(r["duration_s"]) + float(r.get("teardown_s") or 0), 1)
            for r in results
        }
        args.durations.write_text(json.dumps(dict(sorted(seconds.items())), indent=1) + "\n")
    baseline = latest_results(read(args.compare)) if args.compare else None
    text = render(results, baseline, args.format, args.title)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output} ({len(results)} result(s))", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.cli.report FILES…`: the report alone, for a machine with none of the
    engines (a CI job that merges shards): it needs pydantic and PyYAML only
    (requirements/report.txt)."""
    parser = argparse.ArgumentParser(prog="python -m harness.cli.report")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_parser(subparsers)
    args = parser.parse_args(["report", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except CliError as exc:
        print(f"serve-harness report: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
