"""Diagnoses name the role at fault, on the real vLLM E/P/D launcher (tiny Qwen3-VL, CPU):

- a decode worker given prefill's health port: one of the two runs on without a health server
  (Dynamo logs the bind error) -> launcher_invalid naming decode, whichever bound first, and the
  role holding the port, in seconds;
- a decode worker serving another model name -> never_registered naming decode and the name;
- every shipped E/P/D role registers the component its profile names (a real launch: the
  `registered_as_planned` readiness phase passes, so the profiles' names are not hand-made).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.core.paths import REPO_ROOT
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.profiles import Profile, load_profile
from harness.topology.discovery import registered_cards, registered_components
from harness.topology.topology import launch

pytestmark = [pytest.mark.heavy, pytest.mark.vllm, pytest.mark.cpu]

EPD = REPO_ROOT / "profiles" / "vllm" / "epd_qwen3-vl-2b.yaml"
DECODE_START = "start_role decode "


def epd_with(tmp_path: Path, old: str, new: str) -> Profile:
    """The shipped E/P/D profile on a launchers/ copy with one edit to the decode role's lines."""
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    script = tmp_path / "launchers" / "vllm" / "disagg_multimodal_epd.sh"
    text = script.read_text()
    decode_at = text.index(DECODE_START) - 200  # the decode role's env lines come just before
    head, tail = text[:decode_at], text[decode_at:]
    assert tail.count(old) == 1, f"{old!r} in the decode role's lines"
    script.write_text(head + tail.replace(old, new))
    profile = load_profile(EPD, REPO_ROOT)
    return profile.model_copy(update={"launcher": str(script)})


def failure_of(profile: Profile) -> TopologyFailure:
    topo = launch(LaunchSpec.of(profile, "cpu", profile.cases[0]))
    with pytest.raises(TopologyFailure) as info, topo:
        pass
    return info.value


def test_decode_on_prefills_health_port_is_named_with_the_holder(tmp_path: Path) -> None:
    profile = epd_with(tmp_path, "port DYN_SYSTEM_PORT3 8083", "port DYN_SYSTEM_PORT2 8082")
    failure = failure_of(profile)
    assert failure.cause == Cause.LAUNCHER_INVALID, failure.report()
    assert failure.evidence.role == "decode", failure.report()
    assert "worker 'decode' is given system port" in failure.message
    assert "runs without a health server, the port held by role '" in failure.message
    assert "System status server startup failed" in failure.message


def test_decode_serving_another_model_is_named(tmp_path: Path) -> None:
    memory = '--gpu-memory-utilization "$DECODE_MEM"'
    profile = epd_with(tmp_path, memory, f"{memory} --served-model-name other-model")
    failure = failure_of(profile)
    assert failure.cause == Cause.NEVER_REGISTERED, failure.report()
    assert failure.evidence.role == "decode", failure.report()
    assert "role 'decode' registered model 'other-model'" in failure.message


def test_shipped_epd_roles_register_the_components_their_profile_names() -> None:
    profile = load_profile(EPD, REPO_ROOT)
    with launch(LaunchSpec.of(profile, "cpu", profile.cases[0])) as topo:
        kv = topo.plan.scratch_dir / "discovery"
        components = registered_components(kv)
        cards = registered_cards(kv)
        assert "registered_as_planned" in topo.phase_times
    assert {r.discovery_component for r in profile.worker_roles} <= components
    by_port = {r.port: r.name for r in topo.plan.workers}
    named = {by_port[c.system_port]: c.name for c in cards if c.system_port in by_port}
    assert named and set(named.values()) == {profile.model.gpu}, named


def test_a_frontend_without_nixl_is_named_with_its_own_line(tmp_path: Path) -> None:
    """The frontend started past the role adapter (an absolute interpreter, as a hand-written
    launcher may): no NIXL library on its loader path, so with --frontend-decoding the real
    frontend cannot build the model's pipeline. Named from its log, not after register_s."""
    shutil.copytree(REPO_ROOT / "launchers", tmp_path / "launchers")
    common = tmp_path / "launchers" / "lib" / "common.sh"
    text = common.read_text()
    assert text.count("start_role frontend python3 -m") == 1
    common.write_text(
        text.replace("start_role frontend python3 -m", 'start_role frontend "$PYTHON" -m')
    )
    profile = load_profile(EPD, REPO_ROOT)
    profile = profile.model_copy(
        update={"launcher": str(tmp_path / "launchers" / "vllm" / "disagg_multimodal_epd.sh")}
    )
    case = next(c for c in profile.cases if "--frontend-decoding" in c.launcher_args)
    topo = launch(LaunchSpec.of(profile, "cpu", case))
    with pytest.raises(TopologyFailure) as info, topo:
        pass
    failure = info.value
    assert failure.cause == Cause.NEVER_REGISTERED, failure.report()
    assert failure.evidence.role == "frontend"
    assert "the frontend cannot serve the model its workers registered" in failure.message
    assert "stub mode" in failure.message or "materialization" in failure.message
