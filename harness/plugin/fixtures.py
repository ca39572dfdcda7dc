"""The fixtures a serve case runs with (pytest's run phase): the media server, the topology
pool, the baselines, the judge; each topology is taken down after its last case."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from harness.cases.case import CaseRecord, ServeCase
from harness.cases.engine_first import EngineFirst
from harness.cases.loop import run_case
from harness.cases.pool import Opener, TopologyPool
from harness.cases.session import warmup_kinds
from harness.core.paths import cache_dir
from harness.launch.launch_spec import LaunchSpec
from harness.launch.target import TargetSpec, target_plan
from harness.machine.gpu_leases import GpuUnavailable
from harness.machine.port_registry import PortRegistry
from harness.oracles.answer import JudgeSettings
from harness.oracles.baselines import BaselineStore
from harness.oracles.engine_alone import EngineAlone
from harness.oracles.judge import Judging
from harness.payloads.chat import MediaURLs, warmup_bodies
from harness.plugin.collection import serve_case_of
from harness.plugin.options import session_of
from harness.plugin.progress import progress_of
from harness.topology.topology import Topology, attach, launch, new_run_dir

RECORD = pytest.StashKey[CaseRecord]()


@pytest.fixture(scope="session")
def harness_media() -> Iterator[MediaURLs]:
    from harness.payloads.media import AssetServer, build_media

    media = build_media(cache_dir() / "media")
    with AssetServer(media.green_square_png.parent) as server:
        yield MediaURLs.serve(server, media)


@pytest.fixture(scope="session")
def harness_pool(
    request: pytest.FixtureRequest, harness_media: MediaURLs, harness_engines: EngineAlone
) -> Iterator[TopologyPool]:
    session = session_of(request.config)
    runnable = [
        sc
        for item in request.session.items
        if (sc := serve_case_of(item)) is not None and not sc.skip_reason(session.gpus)
    ]
    kinds, texts = warmup_kinds(runnable)
    target: TargetSpec | None = session.target
    first = bool(request.config.getoption("--engine-alone-first"))
    engine_first = EngineFirst(harness_engines, harness_media, lambda: runnable, first)
    with TopologyPool(
        lambda sig: warmup_bodies(
            sorted(kinds.get(sig, set())),
            harness_media,
            text=sig in texts or not kinds.get(sig),
        ),
        opener=target_opener(target) if target else launch,
        say=progress_of(request.config).say,
        # the GPU tier's engine alone answers before each launch (a target records no launch)
        before_start=None if target else engine_first,
    ) as pool:
        yield pool


def target_opener(spec: TargetSpec) -> Opener:
    """The pool's opener in target mode: attach to the deployment instead of launching."""
    api_key = os.environ.get(spec.api_key_env) if spec.api_key_env else None

    def open_target(
        launch: LaunchSpec, warmups: Sequence[dict[str, Any]], registry: PortRegistry
    ) -> Topology[Any]:
        plan = target_plan(spec, launch, new_run_dir(launch.name, launch.tier))
        return attach(plan, warmups, api_key)

    return open_target


@pytest.fixture(scope="session")
def harness_baselines() -> BaselineStore:
    return BaselineStore()


@pytest.fixture(scope="session")
def harness_engines() -> Iterator[EngineAlone]:
    """The session's engines alone (oracles/engine_alone.py), stopped at its end."""
    engines = EngineAlone()
    try:
        yield engines
    finally:
        engines.close()


@pytest.fixture
def serve_run(
    request: pytest.FixtureRequest,
    harness_pool: TopologyPool,
    harness_media: MediaURLs,
    harness_baselines: BaselineStore,
    harness_engines: EngineAlone,
) -> Any:
    record: CaseRecord = request.node.stash.setdefault(RECORD, CaseRecord())

    deployed = session_of(request.config).target is not None
    settings = JudgeSettings(
        # a deployed target has no other topology in this session to compare with, nor a
        # record of how its engines were started
        cross_topology=not deployed,
        engine_alone=not deployed,
        excuse_defects=not request.config.getoption("--strict-defects"),
        engine_alone_first=bool(request.config.getoption("--engine-alone-first")),
    )
    judging = Judging(harness_baselines, settings, harness_engines)

    def run(sc: ServeCase) -> list[tuple[int, int]]:
        try:
            outcome = run_case(sc, harness_pool, harness_media, judging, record)
        except GpuUnavailable as unavailable:  # the machine changed since collection
            pytest.skip(str(unavailable))
        return outcome.verdicts

    return run


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Take the topology down after the last case that shares it (teardown errors land here)."""
    sc = serve_case_of(item)
    if sc is None or "harness_pool" not in getattr(item, "funcargs", {}):
        return
    nxt = serve_case_of(nextitem) if nextitem is not None else None
    skipped = nextitem is not None and nextitem.get_closest_marker("skip") is not None
    if nxt is None or nxt.signature != sc.signature or skipped:
        pool: TopologyPool = getattr(item, "funcargs", {})["harness_pool"]
        record = item.stash.setdefault(RECORD, CaseRecord())
        started = time.monotonic()
        try:
            pool.close()
        finally:
            record.teardown_s = round(time.monotonic() - started, 3)
