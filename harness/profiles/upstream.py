"""Parity with upstream Dynamo's own multimodal serve tests: each upstream id (catalogue in
upstream_ids.yaml) against the case of the same id here, its cadence mark and GPU count on the
GPU tier; ids upstream has that this repo does not carry say why; ids only this repo has are
listed as ours. `python -m harness list --upstream` prints it (docs/upstream-parity.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.profiles.marks import cadence_marks
from harness.profiles.schema import CaseSpec, Profile

CATALOGUE = Path(__file__).with_name("upstream_ids.yaml")


@dataclass(frozen=True)
class UpstreamTest:
    id: str
    cadence: str
    gpus: int
    absent: str | None = None


@dataclass(frozen=True)
class ParityRow:
    id: str
    upstream: UpstreamTest | None  # None: ours only
    ours: str | None  # "profile / case"
    problem: str | None  # a mismatch in cadence or GPU count, or an upstream id missing here

    @property
    def state(self) -> str:
        if self.problem:
            return "MISMATCH"
        if self.upstream is None:
            return "ours"
        return "absent" if self.ours is None else "same"


def upstream_tests(path: Path = CATALOGUE) -> list[UpstreamTest]:
    return [UpstreamTest(**entry) for entry in yaml.safe_load(path.read_text())["tests"]]


def upstream_ids(path: Path = CATALOGUE) -> frozenset[str]:
    """The ids upstream Dynamo runs (carried here or not): `list` and `affected` tag them."""
    return frozenset(t.id for t in upstream_tests(path))


UPSTREAM_TAG = "[upstream id]"


def _ours(profile: Profile, case: CaseSpec) -> str:
    return f"{profile.name} / {case.id or case.suffix or '(no suffix)'}"


def parity(profiles: list[Profile], catalogue: list[UpstreamTest] | None = None) -> list[ParityRow]:
    catalogue = upstream_tests() if catalogue is None else catalogue
    cases = {p.test_id(c): (p, c) for p in profiles for c in p.cases}
    rows = []
    for test in catalogue:
        found = cases.pop(test.id, None)
        if found is None:
            problem = None if test.absent else "upstream runs it; no case here and no reason why"
            rows.append(ParityRow(test.id, test, None, problem))
            continue
        profile, case = found
        marks = cadence_marks(profile, "gpu", case)
        problems = []
        if marks != [test.cadence]:
            problems.append(f"cadence {marks}, upstream {test.cadence}")
        if profile.gpu.gpus != test.gpus:
            problems.append(f"{profile.gpu.gpus} GPU(s), upstream {test.gpus}")
        if test.absent:
            problems.append(f"carried, yet the catalogue says absent ({test.absent})")
        rows.append(ParityRow(test.id, test, _ours(profile, case), "; ".join(problems) or None))
    rows += [ParityRow(tid, None, _ours(p, c), None) for tid, (p, c) in sorted(cases.items())]
    return rows


def render_markdown(rows: list[ParityRow]) -> str:
    lines = [
        "# Upstream parity (generated: `python -m harness list --upstream`)",
        "",
        "Upstream NVIDIA Dynamo's multimodal serve tests for Qwen3-VL-2B and LLaVA-1.5-7B",
        "(`harness/profiles/upstream_ids.yaml` says where they were read) against the cases here:",
        "the same id, with the same cadence mark and GPU count on the GPU tier; upstream ids not",
        "carried say why; the ids only this repo runs follow its own scheme",
        "(`mm_{topology}_{model}_{suffix}`, `mm_sglang_…` for SGLang, `mm_xpu_…` for Intel XPU).",
        "",
        "| upstream id | cadence | GPUs | here | note |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row.upstream is None:
            continue
        up = row.upstream
        here = row.ours or "—"
        note = row.problem or up.absent or "same id, cadence and GPU count"
        lines.append(f"| `{row.id}` | {up.cadence} | {up.gpus} | {here} | {note} |")
    ours = [row for row in rows if row.upstream is None]
    lines += ["", f"Ours only ({len(ours)}):", ""]
    lines += [f"- `{row.id}` ({row.ours})" for row in ours]
    return "\n".join(lines) + "\n"
