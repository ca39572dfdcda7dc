"""Adding an oracle, a diagnosis or a readiness phase is one new file: a module dropped into the
package's folder registers its classes without being listed anywhere, and `harness list` prints
the new oracle where the judge runs it."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import harness.audit
import harness.oracles
import harness.topology
from harness.audit.launch_check import LaunchCheck
from harness.audit.runner import audit
from harness.core.paths import REPO_ROOT
from harness.core.registered import Registered, forget_imported
from harness.launch.launch_spec import LaunchSpec
from harness.oracles.base import CaseOracle, Oracle
from harness.oracles.registry import case_checks, case_oracles
from harness.profiles import load_profile
from harness.topology.diagnoses import LogDiagnosis
from harness.topology.phases import Phase
from harness.topology.topology import launch

NEW_ORACLE = """
from harness.oracles.checks import OracleResult
from harness.oracles.base import Oracle


class Polite(Oracle):
    name = "says please"
    order = 15  # between status (10) and structure (20)

    def applies(self, scope):
        return True

    def check(self, answer):
        return OracleResult("please" in answer.content, "polite")
"""

NEW_DIAGNOSIS = """
from harness.topology.diagnoses import LogDiagnosis


class Overheated(LogDiagnosis):
    name = "overheated"
    order = 25

    def check(self, topo, roles):
        return None
"""

NEW_PHASE = """
from harness.topology.phases import OneLook


class Cooled(OneLook):
    name, order = "cooled", 45  # after registered_as_planned (40), before warmed_up (50)
    what = "the cooling check"
"""

NEW_AUDIT_CHECK = """
from harness.audit.capture import Capture, Finding
from harness.audit.launch_check import LaunchCheck
from harness.profiles import Profile


class EveryRoleNamed(LaunchCheck):
    name, order = "every role named", 15  # after leased ports (10), before roles started (20)

    def check(self, profile: Profile, cap: Capture, launcher: str) -> list[Finding]:
        return [Finding(launcher, role, "a test's finding", "none") for role in sorted(cap.roles)]
"""

# What the `new_module` fixture hands a test: add(package, module name, source, root class).
AddModule = Callable[[ModuleType, str, str, type[Registered]], None]


@pytest.fixture
def new_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AddModule]:
    """Writes `text` as a new module of `package` (its folder extended with a temp dir); takes
    the module and its classes out again afterwards."""
    added: list[tuple[str, str, type[Registered]]] = []

    def add(package: ModuleType, name: str, text: str, root: type[Registered]) -> None:
        folder = tmp_path / package.__name__
        folder.mkdir()
        (folder / f"{name}.py").write_text(text)
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        forget_imported(package.__name__)
        added.append((package.__name__, name, root))

    yield add
    for package, name, root in added:
        sys.modules.pop(f"{package}.{name}", None)
        for cls in [c for c in root.registered if c.__module__ == f"{package}.{name}"]:
            root.unregister(cls)
        forget_imported(package)


def test_a_new_oracle_file_is_judged_and_listed(new_module: AddModule) -> None:
    before = [o.name for o in Oracle.every()]
    new_module(harness.oracles, "polite_oracle", NEW_ORACLE, Oracle)
    after = [o.name for o in Oracle.every()]
    assert after == [before[0], "says please", *before[1:]]
    profile = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)
    [listed, *_] = case_oracles(profile.cases[0], "cpu", profile)
    assert listed.labels[:3] == ("status 200", "says please", "structure")


def test_a_new_diagnosis_file_runs_in_its_place(new_module: AddModule) -> None:
    before = [d.name for d in LogDiagnosis.every()]
    new_module(harness.topology, "overheat_diagnosis", NEW_DIAGNOSIS, LogDiagnosis)
    after = [d.name for d in LogDiagnosis.every()]
    assert after == [*before[:2], "overheated", *before[2:]]


def test_a_new_phase_file_runs_in_its_place_on_launched_and_deployed_topologies(
    new_module: AddModule,
) -> None:
    profile = load_profile(REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml", REPO_ROOT)
    topo = launch(
        LaunchSpec.of(profile, "cpu", profile.cases[0])
    )  # planned and leased, nothing started
    try:
        before = [p.name for p in Phase.for_topology(topo.plan, launched=True)]
        assert [p.name for p in topo.phases] == before
        assert before == [
            "workers_healthy",
            "model_listed",
            "registered_as_planned",
            "warmed_up",
            "loopback_only",
        ]
        deployed = [p.name for p in Phase.for_topology(topo.plan, launched=False)]
        assert deployed == before[:-1]  # the loopback check reads this machine's sockets
        new_module(harness.topology, "cooled_phase", NEW_PHASE, Phase)
        after = [p.name for p in Phase.for_topology(topo.plan, launched=True)]
        assert after == [*before[:3], "cooled", *before[3:]]
    finally:
        topo.stop()


def test_a_new_audit_check_file_runs_on_every_captured_launch(new_module: AddModule) -> None:
    """Audit checks register themselves as oracles and phases do: a new file's class runs in its
    place on each launch the audit captures, no runner edit."""
    before = [c.name for c in LaunchCheck.every()]
    new_module(harness.audit, "role_names_check", NEW_AUDIT_CHECK, LaunchCheck)
    assert [c.name for c in LaunchCheck.every()] == [before[0], "every role named", *before[1:]]
    profile = REPO_ROOT / "profiles" / "vllm" / "agg_qwen3-vl-2b.yaml"
    lines = [f.line() for f in audit([profile]).findings]
    assert any("[worker] a test's finding" in line for line in lines), lines


def test_every_shipped_strategy_is_registered_once() -> None:
    for root in (Oracle, CaseOracle, LogDiagnosis, LaunchCheck):
        names = [s.name for s in root.every()]
        assert len(names) == len(set(names)), root
    phases = [(p.order, p.name) for p in Phase.registered]  # made per topology, not every()
    assert len(phases) == len({n for _, n in phases}) == len({o for o, _ in phases})
    assert [o.name for o in CaseOracle.every()] == [
        "router hit",
        "cache hit",
        "embedding cache hit",
        "spread",
        "the checkout's checks not judged here",
    ]
    router = load_profile(
        REPO_ROOT / "profiles" / "vllm" / "agg_router_qwen3-vl-2b.yaml", REPO_ROOT
    )
    assert len(case_checks(router.cases[0], "cpu", router)) == 3
