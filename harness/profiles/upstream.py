"""Parity with upstream Dynamo's own multimodal serve tests: each upstream id (catalogue in
upstream_ids.yaml) against the case of the same id here, its cadence mark and GPU count on the
GPU tier; ids upstream has that this repo does not carry say why; ids only this repo has are
listed as ours. `serve-harness list --upstream` prints it (docs/reference/upstream-parity.md)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.profiles.load import cadence_marks, mark_names
from harness.profiles.schema import CaseSpec, Profile, Tier

CATALOGUE = Path(__file__).with_name("upstream_ids.yaml")


@dataclass(frozen=True)
class UpstreamTest:
    id: str
    cadence: str
    gpus: int
    absent: str | None = None
    source: str = ""  # which upstream file version the facts come from (`sources:` key)
    stack: str = "dynamo-vllm"
    here: str | None = None  # our id, where ours must differ (upstream reuses an id per stack)
    model: str | None = None  # the model upstream serves on it (None: not recorded)
    model_differs: str | None = None  # why ours serves another
    min_avg_kv_hit_rate: float | None = None  # its cache-hit threshold (cached-tokens payload)
    followups: int = 0  # requests it sends after the first on the same deployment
    accelerator: str = "cuda"  # xpu: an id of vllm_xpu.py (the same ids as CUDA's, another file)
    where: str = ""  # file:line in the checkout it was read from (empty: the catalogue)
    # upstream skips it unconditionally (why), and this repo still runs it by its own id (`here`):
    # the CPU tier has what the upstream runner lacks (e.g. an XPU decode kernel)
    skipped_upstream: str | None = None
    # the same test under another id in another upstream version: joined when a checkout
    # carries this id, left off the catalogue's own page (the other id stands for it there)
    renamed: str | None = None
    # its one payload is a whole request sequence (the uuid pass-through), which our case
    # writes out request by request: its follow-ups are not counted against ours
    sequence: bool = False


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


@functools.lru_cache(maxsize=4)
def _catalogue(path: Path) -> dict[str, Any]:
    catalogue = yaml.safe_load(path.read_text())
    if not isinstance(catalogue, dict):
        raise ValueError(f"{path}: not a mapping")
    return catalogue


def upstream_tests(path: Path = CATALOGUE) -> list[UpstreamTest]:
    """The catalogue; an entry's `source` must name one of its `sources`."""
    data = _catalogue(path)
    tests = [UpstreamTest(**entry) for entry in data["tests"]]
    unknown = sorted({t.source for t in tests} - set(data.get("sources", {})))
    if unknown:
        raise ValueError(f"{path}: tests name sources it does not list: {unknown}")
    return tests


def upstream_sources(path: Path = CATALOGUE) -> dict[str, str]:
    return dict(_catalogue(path).get("sources", {}))


@functools.lru_cache(maxsize=4)
def upstream_ids(path: Path = CATALOGUE) -> frozenset[str]:
    """The ids upstream Dynamo runs (carried here or not): `list` and `affected` tag them."""
    return frozenset(t.here or t.id for t in upstream_tests(path))


UPSTREAM_MARK = "upstream"


def serve_marks(profile: Profile, tier: Tier, case: CaseSpec) -> list[str]:
    """A serve case's pytest marks (load.mark_names), and `upstream` where its id is one of
    upstream's: `pytest -m "pre_merge and upstream and cpu"` runs upstream's pre_merge gate as
    the CPU tier carries it (`serve-harness list --cadence pre_merge --tier cpu` says which)."""
    names = mark_names(profile, tier, case)
    return [*names, UPSTREAM_MARK] if profile.test_id(case) in upstream_ids() else names


UPSTREAM_TAG = "[upstream id]"


def _ours(profile: Profile, case: CaseSpec) -> str:
    return f"{profile.name} / {case.id or case.suffix or '(no suffix)'}"


def parity(
    profiles: list[Profile],
    catalogue: list[UpstreamTest] | None = None,
    undefinable: Mapping[tuple[str, str], str] | None = None,
) -> list[ParityRow]:
    """Each upstream id against our case of the same stack and id. `undefinable`: by (stack,
    id), why a case cannot run as a checkout defines it (a finding)."""
    catalogue = upstream_tests() if catalogue is None else catalogue
    undefinable = undefinable or {}
    # keyed by stack and id: upstream's ids are unique only within one test file (vLLM's and
    # SGLang's files both define mm_agg_router_qwen3.5-0.8b)
    cases: dict[tuple[str, str], tuple[Profile, CaseSpec]] = {
        (p.stack, p.test_id(c)): (p, c) for p in profiles for c in p.cases
    }
    rows = []
    matched: set[tuple[str, str]] = set()
    for test in catalogue:
        if test.renamed and not test.where:
            continue
        # an XPU id repeats a CUDA one: only our own id for it (`here`) matches a case; two
        # upstream ids (one renamed in a later version) may both name ours
        ours = test.here or (test.id if test.accelerator == "cuda" else None)
        found = cases.get((test.stack, ours)) if ours else None
        if found is not None and ours is not None:
            matched.add((test.stack, ours))
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
        problems += fact_problems(test, profile, case)
        refused = undefinable.get((test.stack, ours or ""))
        if refused:
            problems.append(f"cannot run as the checkout defines it: {refused}")
        rows.append(ParityRow(test.id, test, _ours(profile, case), "; ".join(problems) or None))
    rows += [
        ParityRow(tid, None, _ours(p, c), None)
        for (stack, tid), (p, c) in sorted(cases.items())
        if (stack, tid) not in matched
    ]
    return rows


def fact_problems(test: UpstreamTest, profile: Profile, case: CaseSpec) -> list[str]:
    """What upstream checks on this id that our case does not, fact by fact."""
    problems = []
    if profile.stack != test.stack:
        problems.append(f"stack {profile.stack}, upstream {test.stack}")
    if test.model and profile.model.gpu != test.model and not test.model_differs:
        problems.append(f"serves {profile.model.gpu}, upstream {test.model}")
    ours_rate = case.cache_hit.min_avg_hit_rate if case.cache_hit else None
    wanted = test.min_avg_kv_hit_rate  # a stricter threshold of ours checks what upstream's does
    if wanted is not None and (ours_rate is None or ours_rate < wanted):
        problems.append(f"cache-hit threshold {ours_rate}, upstream {test.min_avg_kv_hit_rate}")
    # upstream writes a repeat either as a payload's repeat_count or as a second payload
    # (video_e_pd_qwen: the same video twice); ours as `repeat` on the request
    ours = {len(case.follow_ups), len(case.follow_ups) + case.repeat - 1}
    if test.followups not in ours and not test.sequence:
        problems.append(f"{len(case.follow_ups)} follow-up request(s), upstream {test.followups}")
    return problems


def accounting(rows: list[ParityRow]) -> str:
    """One line: upstream's ids carried here, listed with a reason, and unaccounted."""
    ups = [r for r in rows if r.upstream is not None]
    carried = sum(1 for r in ups if r.ours is not None and not r.problem)
    reasoned = sum(1 for r in ups if r.ours is None and not r.problem)
    unaccounted = len(ups) - carried - reasoned
    return (
        f"Upstream ids: {len(ups)}; carried here {carried}, listed with a reason {reasoned}, "
        f"unaccounted {unaccounted} (a mismatch or an id with no case and no reason)."
    )


def render_markdown(
    rows: list[ParityRow], sources: dict[str, str] | None = None, command: str = "list --upstream"
) -> str:
    """The parity page; `sources` name where the upstream facts were read (the catalogue's by
    default), `command` the one that regenerates it."""
    lines = [
        f"# Upstream parity (generated: `serve-harness {command}`)",
        "",
        "Upstream NVIDIA Dynamo's multimodal serve tests (Qwen3-VL, Qwen2-VL, Qwen2.5-VL, Qwen3.5,",
        "Gemma-4, LLaVA, the custom encoders; vLLM, SGLang and TRT-LLM, CUDA and XPU;",
        "`harness/profiles/upstream_ids.yaml` says where they were read) against the cases here:",
        "the same id, with the same cadence mark and GPU count on the GPU tier; upstream ids not",
        "carried say why; the ids only this repo runs follow its own scheme",
        "(`mm_{topology}_{model}_{suffix}`, `mm_sglang_…` for SGLang, `mm_xpu_…` for Intel XPU).",
        "",
        "| upstream id | stack | cadence | GPUs | source | here | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row.upstream is None:
            continue
        up = row.upstream
        here = row.ours or "—"
        note = row.problem or up.absent or "same id, cadence, GPU count and checks"
        if not row.problem and up.here:
            note += f"; our id `{up.here}` (ids are unique across stacks here)"
        if not row.problem and up.model_differs:
            note += f"; upstream serves {up.model} (Models, below)"
        if not row.problem and up.skipped_upstream and row.ours:
            note += f"; skipped upstream ({up.skipped_upstream}), run here"
        stack = up.stack.removeprefix("dynamo-")
        stack += "" if up.accelerator == "cuda" else f" ({up.accelerator})"
        lines.append(
            f"| `{row.id}` | {stack} | {up.cadence} | {up.gpus} | {up.source} | {here} | {note} |"
        )
    differs = {
        (r.upstream.model, r.upstream.model_differs)
        for r in rows
        if r.upstream is not None and r.upstream.model_differs
    }
    if differs:
        lines += ["", "Models:", ""]
        lines += [
            f"- where upstream serves `{model}`, ours does not: {why}"
            for model, why in sorted(differs)
        ]
    lines += ["", accounting(rows)]
    lines += ["", "Sources:", ""]
    sources = upstream_sources() if sources is None else sources
    lines += [f"- `{key}`: {where}" for key, where in sources.items()]
    ours = [row for row in rows if row.upstream is None]
    lines += ["", f"Ours only ({len(ours)}):", ""]
    lines += [f"- `{row.id}` ({row.ours})" for row in ours]
    return "\n".join(lines) + "\n"
