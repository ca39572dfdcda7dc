"""A serve case: one profile's case on a tier, its requests as this tier sends them, why it
cannot run here, its launch signature (`ServeCase`), and what running it recorded (`CaseRecord`).

How it runs: loop.py (the requests, judged) on pool.py (the launched topology). Which cases run,
in which order and on which shard: selection.py."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from harness.core.paths import REPO_ROOT, sglang_python, sglang_venv_left_out
from harness.launch.dynamo_patch import patched_once
from harness.launch.dynamo_src import PYTHON_ONLY, DynamoSource
from harness.launch.launch_spec import LaunchSpec
from harness.machine.engines import missing_engine
from harness.machine.gpu_leases import shortfall
from harness.machine.gpus import GpuInventory
from harness.machine.memory_plan import plan_memory
from harness.oracles.serving import with_filler
from harness.profiles import CaseSpec, Profile, RequestSpec, Tier
from harness.profiles.checkout_case import NotDefinable, as_the_checkout_defines, matrix_match
from harness.profiles.checkout_matrix import matrix_at
from harness.topology.topology import Topology

XPU_CPU_SKIP = (
    "an Intel XPU profile: on the CPU tier ours runs the same launcher as the CUDA profile of its "
    "topology; only a Dynamo checkout's own XPU launcher (--dynamo-src) is another program"
)


XPU_SKIP = (
    "Intel XPU profile: needs an XPU runner (Level Zero devices, vLLM's XPU build); this "
    "harness leases NVIDIA GPUs it finds through NVML"
)


@dataclass(frozen=True)
class ServeCase:
    profile: Profile
    case: CaseSpec
    tier: Tier
    source: DynamoSource | None = None  # the Dynamo checkout under test (--dynamo-src)
    # run for the answers a selected case is judged against (selection.pull_in): where the
    # checkout holds no launcher for it, ours runs it on the checkout's Python
    baseline: bool = False
    # why the case cannot run as the checkout under test defines it (checkout_case.py)
    checkout_skip: str | None = None
    # where its requests come from: the checkout's file:line (as it defines the case), or ours
    defined_by: str = "ours"

    @classmethod
    def of(
        cls, profile: Profile, case: CaseSpec, tier: Tier, source: DynamoSource | None = None
    ) -> ServeCase:
        """The case on a tier; under a Dynamo checkout, as the checkout's own matrix defines it
        (its requests, their options, its environment: profiles/checkout_case.py)."""
        if source is None or (source.root / PYTHON_ONLY).is_file():
            return cls(profile, case, tier, source)
        matrix = matrix_at(source.root)
        found = (
            matrix_match(profile, case, matrix.of(profile.stack, profile.accelerator))
            if (matrix is not None)
            else None
        )
        if found is None or not found[2]:  # no entry of its own: ours, as the launcher says
            return cls(profile, case, tier, source)
        defined = as_the_checkout_defines(profile, case, found[0])
        if isinstance(defined, NotDefinable):
            return cls(profile, case, tier, source, checkout_skip=defined.why)
        return cls(profile, defined, tier, source, defined_by=f"the checkout's {found[0].where}")

    @property
    def test_id(self) -> str:
        return self.profile.test_id(self.case)

    @property
    def requests(self) -> list[RequestSpec]:
        """Every request the case sends, in order, repeats included (the case's own first)."""
        own = self.case_request
        return [r for r in (own, *self.case.follow_ups) for _ in range(r.repeat)]

    @property
    def case_request(self) -> RequestSpec:
        """The case's own request as this tier sends it: on the CPU, a cache-hit case's prompt
        spans whole KV blocks (schema.CacheHit.cpu_prompt_filler_repeats)."""
        hit = self.case.cache_hit
        if hit is None or self.tier != "cpu" or not hit.cpu_prompt_filler_repeats:
            return self.case
        prompt = with_filler(self.case.prompt, hit.cpu_prompt_filler_repeats)
        return self.case.model_copy(update={"prompt": prompt})

    def skip_reason(self, inventory: GpuInventory | None) -> str | None:
        """Why this case cannot run here; on the GPU tier `inventory` is what the machine offers
        (None: judge only what no machine could change)."""
        if self.checkout_skip:
            return self.checkout_skip
        missing = self.launch_spec.choice.missing if self.signature else None
        if missing:
            return missing
        if self.tier == "cpu" and self.patch_unbuildable:
            return (
                f"runs on the installed ai-dynamo with {self.patch_unbuildable}, and this "
                "machine has no `patch` command to apply it (Debian: the patch package)"
            )
        if self.tier == "cpu":
            if self.profile.cpu is None:
                return f"GPU tier only: {self.profile.cpu_skip}"
            if self.case.cpu_skip:
                return f"GPU tier only: {self.case.cpu_skip}"
            if self.profile.accelerator == "xpu" and self.launch_spec.choice.origin == "ours":
                return XPU_CPU_SKIP
            if self.profile.stack == "dynamo-sglang" and not sglang_python().exists():
                if sglang_venv_left_out():
                    return "HARNESS_SGLANG_CPU=0: the CPU tier's SGLang venv is not built here"
                return (
                    f"the CPU tier's SGLang venv is not installed ({sglang_python()}): run "
                    "scripts/bootstrap.sh (HARNESS_SGLANG_CPU=0 skips building it)"
                )
            return None
        if self.profile.gpu_skip:
            return f"CPU tier only: {self.profile.gpu_skip}"
        if self.case.gpu_skip:
            return self.case.gpu_skip
        if self.profile.accelerator == "xpu":
            return XPU_SKIP
        if inventory is None:
            return None
        needs = plan_memory(self.profile).per_device()
        short = shortfall(inventory.devices, needs, inventory.refused)
        if short is not None:
            return short
        return missing_engine(self.profile.stack)

    @cached_property
    def launch_spec(self) -> LaunchSpec:
        """The launch this case runs on (a profile without this tier has none: ValueError)."""
        return LaunchSpec.of(
            self.profile,
            self.tier,
            self.case,
            source=self.dynamo_under_test,
            baseline=self.baseline,
        )

    def as_baseline(self) -> ServeCase:
        """This case run as the baseline of another (its launcher as `LaunchSpec.of` says)."""
        return self if self.baseline else replace(self, baseline=True)

    @property
    def dynamo_under_test(self) -> DynamoSource | None:
        """The checkout under test; with none, on the CPU tier, the installed ai-dynamo with the
        case's `cpu_dynamo_patch` applied where it declares one."""
        patch = self.case.cpu_dynamo_patch
        if self.source is not None or self.tier != "cpu" or patch is None:
            return self.source
        if self.patch_unbuildable:  # skip_reason says so
            return None
        return DynamoSource(patched_once(REPO_ROOT / patch.file))

    @property
    def patch_unbuildable(self) -> str | None:
        """The case's `cpu_dynamo_patch` where this machine cannot apply it, else None."""
        patch = self.case.cpu_dynamo_patch
        if patch is None or self.source is not None or shutil.which("patch"):
            return None
        return patch.file

    @property
    def signature(self) -> str | None:
        """Cases with equal signatures share one launched topology, across profiles too (e.g.
        `epd` and `epd_video` run on the same E/P/D launch); None: no launch on this tier."""
        return None if self.profile.tier(self.tier) is None else self.launch_spec.signature


@dataclass
class CaseRecord:
    """What one case did, for the results file and the failure report."""

    topology: Topology[Any] | None = None
    reused: bool = False
    answers: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    report: Any = None  # the setup or call TestReport that decides the outcome
    failure: BaseException | None = None
    teardown_failure: BaseException | None = None
    teardown_s: float | None = None
    # per request: (HTTP status, how many oracles reading the answer's content passed)
    verdicts: list[tuple[int, int]] = field(default_factory=list)
    max_logprob_gap: float | None = None  # the largest |engine - model| logprob of its answers
    max_engine_gap: float | None = None  # the largest |served - engine alone| logprob
    served_s: float = 0.0  # the seconds its requests took to be answered (sent to answer)
    # the known transient start-up failures its launch was started again after, one line each
    retries: list[str] = field(default_factory=list)
    # the requests no numeric oracle vouched for (CPU tier), each with why
    unjudged_numerically: list[str] = field(default_factory=list)
