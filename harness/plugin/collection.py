"""Collection (pytest's collect phase): one test per (profile, case), its marks, and the
selection: `--ids`, baselines pulled back in, `--shard`, the run order."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.cases.case import ServeCase
from harness.cases.selection import (
    Shard,
    ShardPlan,
    order_key,
    plan_shards,
    pull_in,
    recorded_durations,
    write_manifest,
)
from harness.core.paths import REPO_ROOT
from harness.core.settings import EdgeSettings
from harness.launch.launch_spec import layout_args
from harness.launch.target import TargetSpec
from harness.machine.gpu_leases import ADMISSION_TIMEOUT_S
from harness.machine.gpus import GpuInventory
from harness.machine.memory_plan import GIB, plan_memory
from harness.plugin.options import session_of
from harness.profiles import ProfileError, load_profiles
from harness.profiles.upstream import serve_marks

DESELECTED = pytest.StashKey[list[pytest.Item]]()
PULLED_IN = pytest.StashKey[list[str]]()
SHARD_PLAN = pytest.StashKey[tuple[Shard, ShardPlan]]()
# pytest-timeout's margin over a case's own budget (launch + every request's request_s).
REQUEST_MARGIN_S = 30.0


def serve_cases(config: pytest.Config) -> list[ServeCase]:
    session = session_of(config)
    profiles = load_profiles(Path(config.getoption("--profiles")), REPO_ROOT)
    cases = [ServeCase.of(p, c, session.tier, session.source) for p in profiles for c in p.cases]
    return cases


def xdist_group_name(sc: ServeCase) -> str:
    """Under `pytest -n N --dist loadgroup`: on the GPU tier each launch is a unit of work; on the
    CPU tier all topologies of one model stay on one worker, next to the baselines they compare
    with (agg, then E/PD)."""
    if sc.tier == "gpu":
        return sc.signature or sc.test_id
    return f"{sc.profile.stack}-{sc.profile.model.short_name}-cpu"


def target_skip(sc: ServeCase, target: TargetSpec | None) -> str | None:
    """In target mode: only the target profile's cases the deployment can serve run."""
    if target is None:
        return None
    if sc.profile.name != target.profile:
        return f"--target runs {target.profile}'s cases only"
    wanted = layout_args(sc.profile, sc.tier, sc.case)
    if wanted != target.launcher_args:
        return f"needs a launch with {wanted}; the target was started with {target.launcher_args}"
    return None


def marks_for(
    sc: ServeCase, inventory: GpuInventory, target: TargetSpec | None = None
) -> list[pytest.MarkDecorator]:
    p = sc.profile
    spec = p.tier(sc.tier)
    marks = [getattr(pytest.mark, m) for m in serve_marks(p, sc.tier, sc.case)]
    if sc.tier == "gpu" and not p.gpu_skip:
        per_gpu = plan_memory(p).per_device()
        marks.append(pytest.mark.vram_gib(round(max(per_gpu) / GIB, 2)))
    if spec is not None:
        # pytest-timeout is the backstop behind the harness's own budget, never inside it.
        limit = spec.budget.total_s + spec.budget.request_s * len(sc.requests) + REQUEST_MARGIN_S
        if sc.tier == "gpu":
            limit += ADMISSION_TIMEOUT_S
        marks.append(pytest.mark.timeout(limit))
    if sc.signature:
        marks.append(pytest.mark.xdist_group(xdist_group_name(sc)))
    reason = target_skip(sc, target) or (
        None if target else sc.skip_reason(inventory if sc.tier == "gpu" else None)
    )
    if reason:
        marks.append(pytest.mark.skip(reason=reason))
    return marks


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "serve_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    try:
        cases = serve_cases(config)
    except ProfileError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:  # its `file: field: message` lines alone, not the harness's frames
        pytest.fail(problem, pytrace=False)
    gpus, target = session_of(config).gpus, session_of(config).target
    params = [pytest.param(sc, id=sc.test_id, marks=marks_for(sc, gpus, target)) for sc in cases]
    metafunc.parametrize("serve_case", params)


def serve_case_of(item: pytest.Item) -> ServeCase | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("serve_case") if callspec else None


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """Remember deselected serve cases: a selected case may need one as its baseline."""
    for item in items:
        if serve_case_of(item) is not None:
            item.config.stash.setdefault(DESELECTED, []).append(item)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Serve cases after the harness's own tests, in harness.cases.selection's order; the
    baselines a selected case needs are pulled back in (harness.cases.selection)."""
    keep_ids(config, items)
    pull_in_baselines(config, items)
    keep_shard(config, items)
    cases = [sc for item in items if (sc := serve_case_of(item)) is not None]
    path = config.getoption("--durations-from")
    key = order_key(cases, recorded_durations(Path(path) if path else None))

    def item_key(item: pytest.Item) -> tuple[Any, ...]:
        sc = serve_case_of(item)
        return (0,) if sc is None else (1, *key(sc))

    items.sort(key=item_key)


def keep_ids(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--ids: keep exactly those serve cases (each must be among the selected ones); every
    other item is deselected, which leaves the other serve cases for the baseline pull-in."""
    spec = config.getoption("--ids")
    if not spec:
        return
    wanted = [test_id.strip() for test_id in spec.split(",") if test_id.strip()]
    selected = {sc.test_id for item in items if (sc := serve_case_of(item)) is not None}
    unknown = [test_id for test_id in wanted if test_id not in selected]
    if unknown:
        raise pytest.UsageError(
            f"--ids: {', '.join(unknown)} not among the selected serve cases (check -m / -k "
            "and `serve-harness list`)"
        )
    dropped = [
        item for item in items if (sc := serve_case_of(item)) is None or sc.test_id not in wanted
    ]
    items[:] = [item for item in items if item not in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def selected_shard(config: pytest.Config) -> Shard | None:
    asked = EdgeSettings.of(os.environ).shard_asked(config.getoption("--shard"))
    try:
        return Shard.parse(*asked) if asked else None
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def keep_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this shard's serve cases; the others are deselected (and named in a manifest next
    to --results, so `harness report` can tell a case no shard ran)."""
    shard = selected_shard(config)
    if shard is None:
        return
    serve = [(item, sc) for item in items if (sc := serve_case_of(item)) is not None]
    path = config.getoption("--durations-from")
    plan = plan_shards(
        [sc for _, sc in serve], shard.count, recorded_durations(Path(path) if path else None)
    )
    mine = {id(sc) for sc in plan.of(shard)}
    dropped = [item for item, sc in serve if id(sc) not in mine]
    items[:] = [item for item in items if item not in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    config.stash[SHARD_PLAN] = (shard, plan)
    results = config.getoption("--results")
    if results and not hasattr(config, "workerinput"):
        write_manifest(Path(results), shard, plan)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A shard the plan gave no case ran all it was given: exit 0, not pytest's 'no tests' (5).
    A CI matrix of N shards over fewer cases (one stack's few ids) must not fail the empty ones;
    the summary line says the shard had none."""
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or SHARD_PLAN not in session.config.stash:
        return
    shard, plan = session.config.stash[SHARD_PLAN]
    if not plan.of(shard) and any(plan.shards):  # cases to share, none of them this shard's
        session.exitstatus = pytest.ExitCode.OK


def pull_in_baselines(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cases a selected case is judged against, back in: deselected ones, and selected ones
    that skip only because the checkout under test holds no launcher for them (ours runs them
    as baselines on its Python: `ServeCase.as_baseline`)."""
    deselected = config.stash.get(DESELECTED, [])
    # a case that will skip judges nothing: its baselines are not pulled in for it
    selected = [
        sc
        for item in items
        if (sc := serve_case_of(item)) is not None and item.get_closest_marker("skip") is None
    ]
    launchless = [item for item in items if launcher_missing(item)]
    candidates = [
        (item, sc.as_baseline())
        for item in [*deselected, *launchless]
        if (sc := serve_case_of(item)) is not None
    ]
    by_case = {id(sc): item for item, sc in candidates}  # pull_in hands back these very values
    pulled = pull_in(selected, [sc for _, sc in candidates])
    if not pulled:
        return
    back = [by_case[id(sc)] for sc in pulled]
    for item, sc in zip(back, pulled, strict=True):
        run_as_baseline(item, sc)
        if item not in items:
            items.append(item)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and "deselected" in reporter.stats:
        reporter.stats["deselected"] = [i for i in reporter.stats["deselected"] if i not in back]
    config.stash[PULLED_IN] = [item.nodeid for item in back]


def launcher_missing(item: pytest.Item) -> bool:
    """The item skips, and only because the checkout under test holds no launcher for it."""
    sc = serve_case_of(item)
    mark = item.get_closest_marker("skip")
    if sc is None or mark is None or not sc.signature:
        return False
    return mark.kwargs.get("reason") == sc.launch_spec.choice.missing


def run_as_baseline(item: pytest.Item, sc: ServeCase) -> None:
    """The item runs `sc` (its case as a baseline), without the skip a missing launcher gave."""
    item.callspec.params["serve_case"] = sc  # type: ignore[attr-defined]
    item.own_markers[:] = [m for m in item.own_markers if m.name != "skip"]
    item.user_properties.append(("pulled_in", "baseline of a selected case"))
