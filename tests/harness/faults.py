"""Fault scenarios against real processes, each run once: cause, time to verdict, leftovers.

Shared by tests/harness/test_faults.py (asserts) and bench/time_to_verdict.py (prints a table).
Every scenario launches a real Dynamo frontend + mocker topology (tests/harness/launchers/), except
the launcher-validity ones (nothing may start) and `hang`, whose worker is a named test double.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import requests

from harness.core.paths import REPO_ROOT, TOPOLOGY_ID_ENV
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.baselines import BaselineStore
from harness.payloads.chat import MediaURLs
from harness.profiles import GpuExpect, Profile, RoleSpec, Tier, load_profile
from harness.topology.deployments import Launched
from harness.topology.health import HealthTimeline
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import POLL_S, Topology, launch
from tests.harness.canned import ProfileJudge

PROFILES = Path(__file__).parent / "profiles"
HELLO = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def fault_profile(name: str, launcher_args: list[str] | None = None, **budget: float) -> Profile:
    """A profile from tests/harness/profiles with cpu launcher args / budget fields replaced."""
    profile = load_profile(PROFILES / f"{name}.yaml", REPO_ROOT)
    assert profile.cpu is not None
    cpu = profile.cpu
    if launcher_args is not None:
        cpu = cpu.model_copy(update={"launcher_args": launcher_args})
    if budget:
        cpu = cpu.model_copy(update={"budget": cpu.budget.model_copy(update=budget)})
    return profile.model_copy(update={"cpu": cpu})


@dataclass
class FaultRun:
    """What one fault scenario did."""

    failure: TopologyFailure | None
    verdict_s: float  # from the fault's own start (launch, kill, request sent, ...) to the verdict
    from_launch_s: float  # from entering the topology to the verdict
    timeout_only_s: float  # what a harness with only a timeout would have waited
    leftovers: list[str]
    listening: list[int]
    timeline: HealthTimeline = field(default_factory=HealthTimeline)
    note: str = ""
    request_phase: bool = False  # a fault of one request: compare verdict_s with request_s

    @property
    def cause(self) -> Cause | None:
        return self.failure.cause if self.failure else None


@dataclass
class Clock:
    """Monotonic start of the launch and of the fault itself (set by the scenario)."""

    launch: float = 0.0
    fault: float | None = None
    fault_wall: float | None = None  # wall-clock fault time (e.g. a log file's mtime)
    note: str = ""


Body = Callable[[Topology[Launched], Clock], None]


def run_fault(
    profile: Profile,
    body: Body | None = None,
    *,
    warmups: list[dict[str, Any]] | None = None,
    before: Callable[[Topology[Launched]], Any] | None = None,
    after: Callable[[Topology[Launched], Clock], None] | None = None,
    request_phase: bool = False,
) -> FaultRun:
    """Launch `profile` (cpu tier), run `body` once ready, and capture the named failure."""
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]), warmups=warmups or [])
    clock = Clock()
    failure: TopologyFailure | None = None
    with _held(before(topo) if before else None):
        clock.launch = time.monotonic()
        try:
            with topo:
                if body is not None:
                    body(topo, clock)
        except TopologyFailure as exc:
            failure = exc
        # The verdict is when the cause was named: the raise then goes through the topology's
        # teardown (`with topo:`), which bench/teardown_speed.py times on its own.
        now_mono, now_wall = time.monotonic(), time.time()
        verdict_mono = failure.named_at if failure is not None else now_mono
        verdict_wall = now_wall - (now_mono - verdict_mono)
        if after is not None and failure is not None:
            after(topo, clock)
        if clock.fault_wall is not None:
            clock.fault = verdict_mono - (verdict_wall - clock.fault_wall)
        topo.stop()
    budget = topo.plan.budget
    leftovers = marked_processes(TOPOLOGY_ID_ENV, topo.plan.topology_id)
    start = clock.fault if clock.fault is not None else clock.launch
    return FaultRun(
        failure=failure,
        verdict_s=round(verdict_mono - start, 3),
        from_launch_s=round(verdict_mono - clock.launch, 3),
        timeout_only_s=budget.request_s if request_phase else budget.total_s,
        leftovers=[f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in leftovers],
        listening=listening_ports(topo.plan.ports.values()),
        timeline=topo.timeline,
        note=clock.note,
        request_phase=request_phase,
    )


@contextmanager
def _held(resource: Any) -> Iterator[None]:
    try:
        yield
    finally:
        if resource is not None:
            resource.close()


def died_at(log_name: str) -> Callable[[Topology[Launched], Clock], None]:
    """Time the verdict from the last write to a log (≈ when the process that wrote it exited)."""

    def after(topo: Topology[Launched], clock: Clock) -> None:
        clock.fault_wall = (topo.plan.log_dir / log_name).stat().st_mtime
        clock.note = f"timed from the last write to {log_name}"

    return after


# -- scenarios ---------------------------------------------------------------------------------


def launcher_invalid(kind: str, tmp: Path) -> FaultRun:
    """missing / not_executable / bad_shebang: LAUNCHER_INVALID before anything starts."""
    path = tmp / f"{kind}.sh"
    if kind == "not_executable":
        path.write_text("#!/usr/bin/env bash\nexit 0\n")
        path.chmod(0o644)
    elif kind == "bad_shebang":
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    profile = fault_profile("mocker").model_copy(update={"launcher": str(path)})
    return run_fault(profile)


def crash_at_startup(tmp: Path) -> FaultRun:
    """A bad flag: the real mocker's argparse exits 2. Timed from its log's last write."""
    profile = fault_profile("mocker", ["--no-such-mocker-flag"])
    return run_fault(profile, after=died_at("worker.log"))


def crash_mid_test(tmp: Path) -> FaultRun:
    """SIGKILL the worker while a long request is in flight: ROLE_EXITED within a poll."""
    profile = fault_profile("mocker", ["--speedup-ratio", "0.001"], request_s=20)

    def body(topo: Topology[Launched], clock: Clock) -> None:
        pid = int((topo.plan.log_dir / "worker.pid").read_text())

        def kill() -> None:
            time.sleep(1.0)
            clock.fault = time.monotonic()
            clock.note = "timed from the SIGKILL"
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()
        topo.post_chat({**HELLO, "max_tokens": 500})

    return run_fault(profile, body, request_phase=True)


def worker_exits_zero(tmp: Path) -> FaultRun:
    """Something outside the harness SIGTERMs the ready worker: the real mocker deregisters and
    exits cleanly, code 0. Still a dead role: ROLE_EXITED (code 0), timed from its last log write.
    """

    def body(topo: Topology[Launched], clock: Clock) -> None:
        os.kill(int((topo.plan.log_dir / "worker.pid").read_text()), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            topo.watch()
            time.sleep(POLL_S)

    return run_fault(fault_profile("mocker"), body, after=died_at("worker.log"))


def launcher_exits(tmp: Path) -> FaultRun:
    """The launcher exits 3 right after starting its roles (they are orphaned, still running)."""
    return run_fault(
        fault_profile("mocker", ["--exit-launcher", "3"]), after=died_at("launcher.log")
    )


def hang(tmp: Path) -> FaultRun:
    """TEST DOUBLE worker (`sleep infinity`): never opens its health port -> NEVER_REGISTERED
    naming it at register_s, long before total_s."""
    return run_fault(fault_profile("fault_double_silent_worker", register_s=5))


def no_health_source(tmp: Path) -> FaultRun:
    """The real mocker without DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS: 503 forever with every
    endpoint ready. Timed from the first 'no_health_source' sample."""
    run = run_fault(fault_profile("mocker", ["--no-health-source"]))
    first = run.timeline.entered("no_health_source")
    if first and run.failure is not None:
        run.verdict_s = round(run.failure.evidence.elapsed_s - first[0], 3)
        run.note = "timed from the first no_health_source sample"
    return run


def role_not_started(tmp: Path) -> FaultRun:
    """The profile declares a role (`encoder`, a typo of a real role's name) the launcher never
    starts: named as soon as the launcher says it started its roles, not at register_s."""
    profile = fault_profile("mocker", register_s=25)
    typo = RoleSpec(name="encoder", kind="aux")
    run = run_fault(
        profile.model_copy(update={"roles": [*profile.roles, typo]}), after=died_at("roles.started")
    )
    run.note = "timed from the launcher's roles.started file"
    return run


def never_registered(tmp: Path) -> FaultRun:
    """The frontend discovers only namespace 'elsewhere'; the real worker registers in 'dynamo':
    healthy, registered, but never listed -> NEVER_REGISTERED at register_s."""
    return run_fault(fault_profile("mocker", ["--frontend-namespace", "elsewhere"], register_s=5))


def port_squat(env_var: str) -> Callable[[Path], FaultRun]:
    def scenario(tmp: Path) -> FaultRun:
        """A foreign listener on a leased port before launch: PORT_IN_USE before any spawn."""

        def squat(topo: Topology[Launched]) -> socket.socket:
            sock = socket.socket()
            sock.bind(("127.0.0.1", topo.plan.ports[env_var]))
            sock.listen()
            return sock

        return run_fault(fault_profile("mocker"), before=squat)

    return scenario


def request_hang(tmp: Path) -> FaultRun:
    """A real mocker slowed 1000x: healthy and listed, but a 500-token answer takes minutes."""
    profile = fault_profile("mocker", ["--speedup-ratio", "0.001"], request_s=3)

    def body(topo: Topology[Launched], clock: Clock) -> None:
        clock.fault, clock.note = time.monotonic(), "timed from the request"
        topo.post_chat({**HELLO, "max_tokens": 500})

    return run_fault(profile, body, request_phase=True)


def _judge(topo: Topology[Launched], profile: Profile, tier: Tier = "cpu") -> ProfileJudge:
    urls = MediaURLs("", "", "", "", "", {})
    plan = topo.plan
    return ProfileJudge(
        tier, BaselineStore(), plan.signature, profile=profile, model_dir=plan.model, urls=urls
    )


def http_error(tmp: Path) -> FaultRun:
    """A request for a model the frontend does not serve: real 404 -> HTTP_ERROR (judge)."""
    profile = fault_profile("mocker")

    def body(topo: Topology[Launched], clock: Clock) -> None:
        clock.fault, clock.note = time.monotonic(), "timed from the request"
        sent = {**HELLO, "model": "no-such-model"}
        resp = topo.post_chat(sent)
        judge = _judge(topo, profile)
        judge.judge(judge.seen(profile.cases[0], resp, sent))

    return run_fault(profile, body, request_phase=True)


def warmup_http_error(tmp: Path) -> FaultRun:
    """A warm-up without max_tokens: the real mocker answers 400 each time -> HTTP_ERROR after
    the readiness phase's repeat limit, not at total_s."""
    bad = {"messages": HELLO["messages"]}
    return run_fault(fault_profile("mocker"), warmups=[bad])


def wrong_answer(tmp: Path) -> FaultRun:
    """The mocker answers random tokens (mostly beyond the tiny vocabulary: null content), never
    the word the case's keyword oracle wants -> WRONG_ANSWER from the structure or keyword oracle
    (judge, GPU-tier expectations)."""
    profile = fault_profile("mocker")
    request = profile.cases[0].model_copy(update={"gpu": GpuExpect(any_of=["green"])})

    def body(topo: Topology[Launched], clock: Clock) -> None:
        clock.fault, clock.note = time.monotonic(), "timed from the request"
        resp = topo.post_chat(HELLO)
        judge = _judge(topo, profile, tier="gpu")
        judge.judge(judge.seen(request, resp, HELLO))

    return run_fault(profile, body, request_phase=True)


def phase_over_budget(tmp: Path) -> FaultRun:
    """A warm-up for a model never listed: 404 is retried (not routable yet) until total_s."""
    profile = fault_profile("mocker", total_s=6, register_s=5)
    return run_fault(profile, warmups=[{**HELLO, "model": "never-listed"}])


@dataclass(frozen=True)
class Fault:
    name: str
    cause: Cause
    bound_s: float  # verdict_s must not exceed this (held in bench/time_to_verdict.py)
    scenario: Callable[[Path], FaultRun]
    role: str | None = None  # the role the verdict must name, if any
    exit_code: int | None = None  # the exit code the verdict must carry, if any


FAULTS: list[Fault] = [
    Fault(
        "launcher_missing",
        Cause.LAUNCHER_INVALID,
        1.0,
        lambda tmp: launcher_invalid("missing", tmp),
    ),
    Fault(
        "launcher_not_executable",
        Cause.LAUNCHER_INVALID,
        1.0,
        lambda tmp: launcher_invalid("not_executable", tmp),
    ),
    Fault(
        "launcher_bad_shebang",
        Cause.LAUNCHER_INVALID,
        1.0,
        lambda tmp: launcher_invalid("bad_shebang", tmp),
    ),
    Fault("port_squat_frontend", Cause.PORT_IN_USE, 1.0, port_squat("DYN_HTTP_PORT")),
    Fault("port_squat_worker", Cause.PORT_IN_USE, 1.0, port_squat("DYN_SYSTEM_PORT1")),
    Fault("crash_at_startup", Cause.ROLE_EXITED, 1.5, crash_at_startup, role="worker", exit_code=2),
    Fault("crash_mid_test", Cause.ROLE_EXITED, 1.0, crash_mid_test, role="worker"),
    Fault(
        "worker_exits_zero", Cause.ROLE_EXITED, 1.5, worker_exits_zero, role="worker", exit_code=0
    ),
    Fault("launcher_exits", Cause.LAUNCHER_EXITED, 1.5, launcher_exits, exit_code=3),
    Fault("hang_double", Cause.NEVER_REGISTERED, 7.0, hang, role="worker"),
    Fault("no_health_source", Cause.NO_HEALTH_SOURCE, 3.0 + 5.0, no_health_source, role="worker"),
    Fault("never_registered", Cause.NEVER_REGISTERED, 7.0, never_registered),
    Fault("role_not_started", Cause.ROLE_NOT_STARTED, 2.0, role_not_started, role="encoder"),
    Fault("request_hang", Cause.REQUEST_TIMEOUT, 3.0 + 1.5, request_hang),
    Fault("http_error", Cause.HTTP_ERROR, 2.0, http_error),
    Fault("warmup_http_error", Cause.HTTP_ERROR, 15.0, warmup_http_error),
    Fault("wrong_answer", Cause.WRONG_ANSWER, 2.0, wrong_answer),
    Fault("phase_over_budget", Cause.PHASE_TIMEOUT, 6.0 + 1.5, phase_over_budget),
]


def healthy_readiness_overhead() -> dict[str, float]:
    """A healthy mocker topology with one warm-up: seconds from the last worker turning ready
    (timeline) to the first request being sent, and the other phase marks."""
    profile = fault_profile("mocker")
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]), [HELLO])
    first_sent: list[float] = []
    original = topo.post_chat

    def recording(
        body: dict[str, Any], check_roles: bool = True, timeout_s: float | None = None
    ) -> requests.Response:
        if not first_sent:
            first_sent.append(topo.elapsed())
        return original(body, check_roles, timeout_s)

    with mock.patch.object(topo, "post_chat", recording), topo:
        ready_s = topo.ready_s or 0.0
    last_ready = max(topo.timeline.entered("ready"))
    return {
        "last_worker_ready_s": round(last_ready, 3),
        "model_listed_s": topo.phase_times.get("model_listed", 0.0),
        "first_request_s": round(first_sent[0], 3),
        "ready_s": round(ready_s, 3),
        "overhead_s": round(first_sent[0] - last_ready, 3),
    }
