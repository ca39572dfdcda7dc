"""The engine alone before the launch: where a topology holds the device its engine alone needs
(the GPU tier: the card), the references are computed before the topology starts, on what its
lease holds (the cards, the answering role's own memory share), and the engine alone is stopped
before the first role starts; while the topology runs, answers are read from the cache only.

What the answering role will run with is read from a dry run of the launch's own launcher (the
audit's capture: every role's adapter writes its record and exits, no engine starts), resolved
with the launch's own ports, model and environment. The role's real record is held against it
when its answers are judged (`EngineAlone.not_computed`): where the two differ, the answers are
not judged against the engine alone and the result says what differed."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.audit.capture import DRY_PYTHON, run_launcher
from harness.cases.case import ServeCase
from harness.core.role_contract import REAL_PYTHON_ENV
from harness.core.verdict import Cause
from harness.launch.launch_spec import LaunchSpec
from harness.launch.plan import LaunchPlan, resolve
from harness.machine.gpus import GpuMemoryNotReturned
from harness.oracles.answer import Scope, answers_before_launch
from harness.oracles.engine_alone import EngineAlone, EngineAloneError, EngineLaunch
from harness.oracles.model_reference import TOP_LOGPROBS
from harness.payloads.chat import MediaURLs, request_body
from harness.topology.topology import Topology


def answering_roles(sc: ServeCase) -> list[str]:
    """The worker roles that answer (no encode worker), in the profile's order: the engine the
    last of them that recorded one ran is the engine a request was answered by."""
    return [r.name for r in sc.profile.worker_roles if r.discovery_component != "encode"]


def judged_bodies(sc: ServeCase, urls: MediaURLs) -> list[dict[str, Any]]:
    """Each request of the case the engine alone is asked, as the model sees it (loop.py builds
    the same bodies: `Answer.seen`)."""
    bodies = []
    for request in sc.requests:
        if Scope(request, sc.tier, sc.profile).expect_status != 200:
            continue
        uuid = "image_uuid" in request.media
        bodies.append(request_body(request, urls, TOP_LOGPROBS, as_model_sees_it=uuid))
    return bodies


def dry_launch(
    spec: LaunchSpec, plan: LaunchPlan, stack: str, roles: Sequence[str], work: Path
) -> EngineLaunch | str:
    """What the answering role will run with: the launch's launcher run dry (audit/capture.py)
    with the launch's own ports, model and environment, into `work`; else why not, in the dry
    run's words."""
    dry = resolve(
        spec,
        ports=plan.ports,
        run_dir=work / "run",
        scratch_dir=work / "scratch",
        model=plan.model,
        topology_id=plan.topology_id,
        marker_env={},  # the launch's own, in its env: whatever the dry run leaves, its stop reaps
        base_env=plan.env,
    )
    capture = run_launcher(dry, work)
    launch = EngineLaunch.of_roles(dry.log_dir, roles, stack)
    if launch is not None and launch.python == DRY_PYTHON:  # the interpreter the role will run
        return replace(launch, python=plan.env[REAL_PYTHON_ENV])
    if launch is not None:
        return launch
    refused = "; ".join(f"{role}: {why}" for role, why in capture.refused.items())
    said = refused or (capture.stderr.strip().splitlines() or ["no role recorded one"])[-1]
    return f"the launcher's dry run recorded no engine launch of {', '.join(roles)} ({said})"


@dataclass
class EngineFirst:
    """The pool's hook before a topology starts (TopologyPool.before_start): the engine alone's
    answers to every request of the session's cases on that launch, computed, then the engine
    alone stopped. `cases`: the session's cases (of every launch); `every_tier`: on the CPU tier
    too (JudgeSettings.engine_alone_first), where the GPU tier's way is otherwise not needed."""

    engines: EngineAlone
    urls: MediaURLs
    cases: Callable[[], Sequence[ServeCase]]
    every_tier: bool = False

    def __call__(self, spec: LaunchSpec, topo: Topology[Any]) -> None:
        if not answers_before_launch(spec.tier, self.every_tier):
            return
        signature = topo.plan.signature
        cases = [sc for sc in self.cases() if sc.signature == signature]
        if not cases:
            self.engines.before_launch[signature] = "no case of this launch was known before it"
            return
        with tempfile.TemporaryDirectory(prefix="engine-first-") as work:
            try:
                stack, roles = cases[0].profile.stack, answering_roles(cases[0])
                predicted = dry_launch(spec, topo.plan, stack, roles, Path(work))
            except (OSError, ValueError) as exc:
                predicted = f"the launcher's dry run failed: {exc}"
        self.engines.before_launch[signature] = predicted
        if isinstance(predicted, str):
            return
        try:  # a refusal is kept where the answers read it (the cache; EngineAlone.refused)
            for sc in cases:
                for body in judged_bodies(sc, self.urls):
                    with contextlib.suppress(EngineAloneError):
                        self.engines.answer(predicted, body, self.urls.fetch, TOP_LOGPROBS)
        finally:
            self.engines.close()  # the device is the topology's from here on
        returned = getattr(topo.deployment, "device_returned", None)  # a launch's, not a target's
        if returned is not None:
            try:
                returned()
            except GpuMemoryNotReturned as exc:
                raise topo.failure(
                    Cause.TEARDOWN_UNCLEAN, f"the engine alone before the launch: {exc}"
                ) from None
