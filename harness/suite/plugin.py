"""pytest plugin: tier choice, profile-driven serve cases, shared topologies, results, evidence."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.core.paths import REPO_ROOT, cache_dir
from harness.core.secrets import scrub_text
from harness.core.verdict import TopologyFailure
from harness.judging.answer import JudgeSettings
from harness.judging.baselines import BaselineStore
from harness.judging.chat_request import MediaURLs, warmup_bodies
from harness.judging.judge import CaseJudge
from harness.profiles import ProfileError, load_profiles
from harness.profiles.marks import mark_names
from harness.report.junit import junit_properties
from harness.resources.gpu_inventory import GpuInventory
from harness.resources.gpu_slot import ADMISSION_TIMEOUT_S
from harness.resources.memory_plan import GIB, plan_memory
from harness.resources.tier import detect_tier
from harness.runtime.dynamo_src import DYNAMO_SRC_ENV, DynamoSource, DynamoSourceError
from harness.runtime.launch import launch, new_run_dir
from harness.runtime.launch_env import remove_scratch_of
from harness.runtime.plan import launcher_args
from harness.runtime.processes import sweep_stale
from harness.runtime.roles import tail
from harness.runtime.signal_handlers import term_raises_interrupt
from harness.runtime.target import (
    TargetError,
    TargetSpec,
    TargetTopology,
    check_target,
    load_target,
    target_plan,
)
from harness.suite.baseline_selection import pull_in
from harness.suite.case_order import order_key, recorded_durations
from harness.suite.pool import TopologyPool
from harness.suite.results import ResultsFile, result_record
from harness.suite.serve_case import CaseRecord, ServeCase, run_case
from harness.suite.shards import Shard, ShardPlan, plan_shards, write_manifest

RECORD = pytest.StashKey[CaseRecord]()
DESELECTED = pytest.StashKey[list[pytest.Item]]()
PULLED_IN = pytest.StashKey[list[str]]()
SHARD_PLAN = pytest.StashKey[tuple[Shard, ShardPlan]]()
REQUEST_MARGIN_S = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("serve-harness")
    group.addoption("--tier", default="auto", choices=["auto", "cpu", "gpu"],
                    help="tier to run (default: gpu if NVML sees a GPU, else cpu)")  # fmt: skip
    group.addoption("--results", default=None, help="append one JSON line per serve case here")
    group.addoption("--profiles", default=str(REPO_ROOT / "profiles"), help="profiles directory")
    group.addoption(
        "--target",
        default=None,
        metavar="FILE",
        help="run one profile's cases against a topology something else deployed (YAML: "
        "frontend, each role's health/metrics URL; harness/runtime/target.py); no launch",
    )
    group.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run shard K of N (cases that share a launch or a baseline stay together; balanced "
        "by --durations-from); also HARNESS_SHARD=K/N",
    )
    group.addoption(
        "--ids",
        default=None,
        metavar="ID,…",
        help="run exactly these serve ids and nothing else (unlike node ids, the baselines they "
        "are judged against are pulled in)",
    )
    group.addoption(
        "--dynamo-src",
        default=os.environ.get(DYNAMO_SRC_ENV) or None,
        metavar="PATH",
        help="a Dynamo checkout whose Python every role runs (PATH/components/src ahead of the "
        "installed wheel; each role's import is recorded and checked); also HARNESS_DYNAMO_SRC",
    )
    group.addoption(
        "--strict-defects",
        action="store_true",
        default=os.environ.get("HARNESS_STRICT_DEFECTS") == "1",
        help="a declared upstream defect (known_defect) excuses nothing: its oracles fail, naming "
        "it (the unpatched side of an unpatched-versus-patched run); also HARNESS_STRICT_DEFECTS=1",
    )
    group.addoption(
        "--durations-from",
        default=str(REPO_ROOT / "runs" / "results.jsonl"),
        help="results.jsonl of an earlier run: the GPU tier runs the longest groups first",
    )


def use_dynamo_src(path: str | None) -> None:
    """Every launch of this session runs the checkout's Python (launch_env reads the variable)."""
    if not path:
        return
    source = DynamoSource(Path(path).resolve())
    try:
        source.check()
    except DynamoSourceError as exc:
        raise pytest.UsageError(str(exc)) from None
    os.environ[DYNAMO_SRC_ENV] = str(source.root)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "vram_gib(n): GiB the largest GPU share of a case needs (its memory plan)"
    )
    inventory = GpuInventory.detect()
    target = load_target_option(config)
    tier = (
        target.tier if target else detect_tier(config.getoption("--tier"), len(inventory.devices))
    )
    use_dynamo_src(config.getoption("--dynamo-src"))
    config.harness_target = target  # type: ignore[attr-defined]
    config.harness_tier = tier  # type: ignore[attr-defined]
    config.harness_gpus = inventory  # type: ignore[attr-defined]
    config.harness_swept = []  # type: ignore[attr-defined]
    if not hasattr(config, "workerinput"):
        swept = sweep_stale(str(REPO_ROOT), cleanup=remove_scratch_of)
        config.harness_swept = swept  # type: ignore[attr-defined]
    term_raises_interrupt()  # for the whole session: never restored


def pytest_report_header(config: pytest.Config) -> list[str]:
    inventory: GpuInventory = config.harness_gpus  # type: ignore[attr-defined]
    lines = [f"serve-harness tier: {config.harness_tier} ({len(inventory.devices)} GPU(s) visible)"]  # type: ignore[attr-defined]
    lines += [f"serve-harness GPU left out: {why}" for why in inventory.refused]
    for swept in config.harness_swept:  # type: ignore[attr-defined]
        lines.append(f"serve-harness swept a leftover of a dead session: {swept}")
    return lines


def serve_cases(config: pytest.Config) -> list[ServeCase]:
    tier = config.harness_tier  # type: ignore[attr-defined]
    profiles = load_profiles(Path(config.getoption("--profiles")), REPO_ROOT)
    return [ServeCase(p, c, tier) for p in profiles for c in p.cases]


def xdist_group_name(sc: ServeCase) -> str:
    """Under `pytest -n N --dist loadgroup`: on the GPU tier each launch is a unit of work; on the
    CPU tier all topologies of one model stay on one worker, next to the baselines they compare
    with (agg, then E/PD)."""
    if sc.tier == "gpu":
        return sc.signature or sc.test_id
    return f"{sc.profile.stack}-{sc.profile.model.short_name}-cpu"


def load_target_option(config: pytest.Config) -> TargetSpec | None:
    option = config.getoption("--target")
    if not option:
        return None
    path = Path(option)
    try:
        spec = load_target(path)
        profiles = {
            p.name: p for p in load_profiles(Path(config.getoption("--profiles")), REPO_ROOT)
        }
        if spec.profile not in profiles:
            raise TargetError(f"{path}: profile: no profile named {spec.profile!r}")
        check_target(spec, profiles[spec.profile], path)
    except (TargetError, ProfileError) as exc:
        raise pytest.UsageError(str(exc)) from None
    return spec


def target_skip(sc: ServeCase, target: TargetSpec | None) -> str | None:
    """In target mode: only the target profile's cases the deployment can serve run."""
    if target is None:
        return None
    if sc.profile.name != target.profile:
        return f"--target runs {target.profile}'s cases only"
    wanted = launcher_args(sc.profile, sc.tier, sc.case)
    if wanted != target.launcher_args:
        return f"needs a launch with {wanted}; the target was started with {target.launcher_args}"
    return None


def marks_for(
    sc: ServeCase, inventory: GpuInventory, target: TargetSpec | None = None
) -> list[pytest.MarkDecorator]:
    p = sc.profile
    spec = p.tier(sc.tier)
    marks = [getattr(pytest.mark, m) for m in mark_names(p, sc.tier, sc.case)]
    if sc.tier == "gpu":
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
    gpus = config.harness_gpus  # type: ignore[attr-defined]
    target = config.harness_target  # type: ignore[attr-defined]
    params = [pytest.param(sc, id=sc.test_id, marks=marks_for(sc, gpus, target)) for sc in cases]
    metafunc.parametrize("serve_case", params)


def _serve_case(item: pytest.Item) -> ServeCase | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("serve_case") if callspec else None


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    """Remember deselected serve cases: a selected case may need one as its baseline."""
    for item in items:
        if _serve_case(item) is not None:
            item.config.stash.setdefault(DESELECTED, []).append(item)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Serve cases after the harness's own tests, in harness.suite.case_order's order; the
    baselines a selected case needs are pulled back in (harness.suite.baseline_selection)."""
    keep_ids(config, items)
    pull_in_baselines(config, items)
    keep_shard(config, items)
    cases = [sc for item in items if (sc := _serve_case(item)) is not None]
    path = config.getoption("--durations-from")
    key = order_key(cases, recorded_durations(Path(path) if path else None))

    def item_key(item: pytest.Item) -> tuple[Any, ...]:
        sc = _serve_case(item)
        return (0,) if sc is None else (1, *key(sc))

    items.sort(key=item_key)


def keep_ids(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--ids: keep exactly those serve cases (each must be among the selected ones); every
    other item is deselected, which leaves the other serve cases for the baseline pull-in."""
    spec = config.getoption("--ids")
    if not spec:
        return
    wanted = [test_id.strip() for test_id in spec.split(",") if test_id.strip()]
    selected = {sc.test_id for item in items if (sc := _serve_case(item)) is not None}
    unknown = [test_id for test_id in wanted if test_id not in selected]
    if unknown:
        raise pytest.UsageError(
            f"--ids: {', '.join(unknown)} not among the selected serve cases (check -m / -k "
            "and `python -m harness list`)"
        )
    dropped = [
        item for item in items if (sc := _serve_case(item)) is None or sc.test_id not in wanted
    ]
    items[:] = [item for item in items if item not in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def selected_shard(config: pytest.Config) -> Shard | None:
    spec = config.getoption("--shard")
    try:
        return Shard.parse(spec) if spec else Shard.from_env()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def keep_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this shard's serve cases; the others are deselected (and named in a manifest next
    to --results, so `harness report` can tell a case no shard ran)."""
    shard = selected_shard(config)
    if shard is None:
        return
    serve = [(item, sc) for item in items if (sc := _serve_case(item)) is not None]
    path = config.getoption("--durations-from")
    plan = plan_shards([sc for _, sc in serve], shard.count, recorded_durations(
        Path(path) if path else None))  # fmt: skip
    mine = {id(sc) for sc in plan.of(shard)}
    dropped = [item for item, sc in serve if id(sc) not in mine]
    items[:] = [item for item in items if item not in dropped]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    config.stash[SHARD_PLAN] = (shard, plan)
    results = config.getoption("--results")
    if results and not hasattr(config, "workerinput"):
        write_manifest(Path(results), shard, plan)


def pull_in_baselines(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselected = config.stash.get(DESELECTED, [])
    by_case = {id(sc): item for item in deselected if (sc := _serve_case(item)) is not None}
    selected = [sc for item in items if (sc := _serve_case(item)) is not None]
    pulled = pull_in([*selected], [_serve_case(i) for i in deselected])  # type: ignore[misc]
    if not pulled:
        return
    back = [by_case[id(sc)] for sc in pulled]
    for item in back:
        item.user_properties.append(("pulled_in", "baseline of a selected case"))
    items.extend(back)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and "deselected" in reporter.stats:
        reporter.stats["deselected"] = [i for i in reporter.stats["deselected"] if i not in back]
    config.stash[PULLED_IN] = [item.nodeid for item in back]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if SHARD_PLAN in config.stash:
        shard, plan = config.stash[SHARD_PLAN]
        terminalreporter.write_line(
            f"serve-harness shard {shard}: {len(plan.of(shard))} case(s), predicted "
            f"{plan.seconds[shard.index - 1]:.0f} s (all shards: {plan.seconds})"
        )
    pulled = config.stash.get(PULLED_IN, [])
    if pulled:
        terminalreporter.write_line(
            f"serve-harness pulled in {len(pulled)} baseline case(s) the selection left out: "
            + ", ".join(node.split("[")[-1].rstrip("]") for node in pulled)
        )


@pytest.fixture(scope="session")
def harness_media() -> Iterator[MediaURLs]:
    from harness.judging.asset_server import AssetServer
    from harness.judging.media import build_media

    media = build_media(cache_dir() / "media")
    with AssetServer(media.green_square_png.parent) as server:
        yield MediaURLs.serve(server, media)


@pytest.fixture(scope="session")
def harness_pool(
    request: pytest.FixtureRequest, harness_media: MediaURLs
) -> Iterator[TopologyPool]:
    kinds: dict[str, set[str]] = {}
    gpus = request.config.harness_gpus  # type: ignore[attr-defined]
    for item in request.session.items:
        sc = _serve_case(item)
        if sc is not None and sc.signature and not sc.skip_reason(gpus):
            for req in sc.requests:
                expect = req.gpu if sc.tier == "gpu" else req.cpu
                if expect.status == 200:
                    kinds.setdefault(sc.signature, set()).update(req.media)
    target: TargetSpec | None = request.config.harness_target  # type: ignore[attr-defined]
    pool = TopologyPool(
        request.config.harness_tier,  # type: ignore[attr-defined]
        lambda sig: warmup_bodies(kinds.get(sig, set()), harness_media),  # type: ignore[arg-type]
        opener=target_opener(target) if target else launch,
    )
    try:
        yield pool
    finally:
        pool.close()


def target_opener(spec: TargetSpec) -> Any:
    """The pool's opener in target mode: attach to the deployment instead of launching."""
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None

    def open_target(profile: Any, tier: Any, case: Any, warmups: Any, registry: Any) -> Any:
        return TargetTopology(target_plan(spec, profile, new_run_dir(profile, tier)), warmups,
                              api_key)  # fmt: skip

    return open_target


@pytest.fixture(scope="session")
def harness_baselines() -> BaselineStore:
    return BaselineStore()


@pytest.fixture
def serve_run(
    request: pytest.FixtureRequest,
    harness_pool: TopologyPool,
    harness_media: MediaURLs,
    harness_baselines: BaselineStore,
) -> Any:
    record = request.node.stash.setdefault(RECORD, CaseRecord())

    def judge_for(sc: ServeCase, topo: Any) -> CaseJudge:
        settings = JudgeSettings(
            # a deployed target has no other topology in this session to compare with
            cross_topology=request.config.harness_target is None,  # type: ignore[attr-defined]
            excuse_defects=not request.config.getoption("--strict-defects"),
        )
        return CaseJudge(sc.profile, sc.tier, topo.plan.model, harness_media, harness_baselines,
                         topo.plan.signature, settings)  # fmt: skip

    def run(sc: ServeCase) -> list[tuple[int, int]]:
        run_case(sc, harness_pool, harness_media, judge_for, record)
        return record.verdicts

    return run


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Take the topology down after the last case that shares it (teardown errors land here)."""
    sc = _serve_case(item)
    if sc is None or "harness_pool" not in getattr(item, "funcargs", {}):
        return
    nxt = _serve_case(nextitem) if nextitem is not None else None
    if nxt is None or nxt.signature != sc.signature or nextitem.get_closest_marker("skip"):
        pool: TopologyPool = item.funcargs["harness_pool"]  # type: ignore[attr-defined]
        record = item.stash.setdefault(RECORD, CaseRecord())
        started = time.monotonic()
        try:
            pool.close()
        finally:
            record.teardown_s = round(time.monotonic() - started, 3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    sc = _serve_case(item)
    if sc is None:
        return
    record = item.stash.setdefault(RECORD, CaseRecord())
    failure = call.excinfo.value if call.excinfo else None
    if isinstance(failure, TopologyFailure):
        _attach_evidence(report, failure, record)
    if report.when == "call" or not report.passed:
        record.report = record.report if report.when == "teardown" and record.report else report
        record.failure = record.failure or failure
    if report.when == "teardown":
        if not report.passed:
            record.teardown_failure = failure
        if record.report is None:
            return
        result = result_record(sc, record)
        report.user_properties.extend(junit_properties(result))  # JUnit <property> for dashboards
        path = item.config.getoption("--results")
        if path:
            ResultsFile(Path(path)).append(result)


def _attach_evidence(report: pytest.TestReport, failure: TopologyFailure, rec: CaseRecord) -> None:
    report.sections.append(("serve-harness verdict", failure.report()))
    topo = rec.topology
    if topo is None:
        return
    events = "\n".join(json.dumps(e) for e in topo.timeline.events)
    report.sections.append(("health timeline", events))
    for role in topo.plan.roles:
        text = scrub_text(tail(topo.roles.log_path(role.name), 40), topo.plan.env)
        report.sections.append((f"log {role.name} ({topo.roles.log_path(role.name)})", text))
