"""The two seed regressions, with the REAL vLLM E/P/D launcher and the tiny Qwen3-VL on CPU.

(a) the encode worker's DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS line removed (sed on a copy of the
    launchers tree): its /health is 503 forever with every endpoint ready -> NO_HEALTH_SOURCE
    naming 'encode' (bench/time_to_verdict.py --with-vllm times it: within 15 s of its endpoint
    registering, the first 'no_health_source' sample).
(b) the encode worker never comes up: its command replaced by `sleep infinity` (a TEST DOUBLE for
    an encoder that never serves) -> prefill waits for an encoder -> NEVER_REGISTERED naming
    'encode' at register_s (60 s), far below the total budget (a verdict at the total budget
    would be PHASE_TIMEOUT; the bench times it).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT, TOPOLOGY_ID_ENV
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import Profile, load_profile
from harness.topology.health import HealthTimeline
from harness.topology.processes import listening_ports, marked_processes
from harness.topology.topology import launch

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

EPD_PROFILE = REPO_ROOT / "profiles" / "vllm" / "epd_qwen3-vl-2b.yaml"
EPD_LAUNCHER = Path("launchers") / "vllm" / "disagg_multimodal_epd.sh"
HEALTH_LINE = re.compile(r"^DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS='\[\"generate\"\]' \\\n", re.M)
# the encode role's command, from `start_role encode` to its last continued line
ENCODE_CMD = re.compile(r"^  start_role encode python3[^\n]*\\\n(?:  [^\n]*\\\n)*  [^\n]*\n", re.M)
NO_HEALTH_SOURCE_BOUND_S = 15.0
REGISTER_S = 60.0


def launchers_copy(tmp_path: Path, edit: re.Pattern[str], replacement: str) -> Path:
    """A copy of launchers/ in tmp_path with one edit to the E/P/D launcher; its path."""
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    script = tmp_path / EPD_LAUNCHER
    text, count = edit.subn(replacement, script.read_text())
    assert count == 1, f"edit {edit.pattern!r} matched {count} times in {script}"
    script.write_text(text)
    return script


def epd_profile(launcher: Path, **budget: float) -> Profile:
    profile = load_profile(EPD_PROFILE, REPO_ROOT)
    assert profile.cpu is not None
    cpu = profile.cpu.model_copy(
        update={"budget": profile.cpu.budget.model_copy(update=budget)} if budget else {}
    )
    return profile.model_copy(update={"launcher": str(launcher), "cpu": cpu})


def run_to_failure(profile: Profile) -> tuple[TopologyFailure, HealthTimeline, str]:
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]))
    with pytest.raises(TopologyFailure) as info, topo:
        pass
    assert not marked_processes(TOPOLOGY_ID_ENV, topo.plan.topology_id), "processes left"
    assert not listening_ports(topo.plan.ports.values()), "leased ports still listening"
    assert "teardown" not in info.value.evidence.detail, info.value.evidence.detail
    return info.value, topo.timeline, topo.plan.topology_id


def test_encode_without_health_source_is_named_fast(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    launcher = launchers_copy(tmp_path, HEALTH_LINE, "")
    failure, timeline, _ = run_to_failure(epd_profile(launcher))
    assert failure.cause == Cause.NO_HEALTH_SOURCE, failure.report()
    assert failure.evidence.role == "encode", failure.report()
    first = timeline.entered("no_health_source", role="encode")[0]
    after_s = failure.evidence.elapsed_s - first
    record_property("encode_endpoint_registered_s", first)
    record_property("verdict_after_registered_s", round(after_s, 2))
    print(
        f"\nseed (a): encode endpoint up at {first:.1f} s, verdict {after_s:.2f} s later "
        f"(total {failure.evidence.elapsed_s:.1f} s)"
    )


def test_encode_never_up_is_named_at_register_budget(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    double = "  start_role encode sleep infinity  # TEST DOUBLE: an encoder that never serves\n"
    launcher = launchers_copy(tmp_path, ENCODE_CMD, double)
    profile = epd_profile(launcher, register_s=REGISTER_S)
    failure, _, _ = run_to_failure(profile)
    total = profile.cpu.budget.total_s if profile.cpu else 0.0
    record_property("verdict_s", failure.evidence.elapsed_s)
    took = failure.evidence.elapsed_s
    print(
        f"\nseed (b): {failure.cause} naming {failure.evidence.role} after {took:.1f} s "
        f"(register_s {REGISTER_S:.0f}, total {total:.0f})"
    )
    assert failure.cause == Cause.NEVER_REGISTERED, failure.report()
    assert failure.evidence.role == "encode", failure.report()
    missing = failure.evidence.detail["missing_roles"]
    assert isinstance(missing, list) and "encode" in missing, failure.report()
