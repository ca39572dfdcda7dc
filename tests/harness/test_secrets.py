"""Secrets (HF_TOKEN, *_API_KEY, *_TOKEN) never reach a verdict, a report section or results."""

import json
import os
from pathlib import Path

import pytest

from harness.core.secrets import REDACTED, is_secret, redact_env, scrub_text
from harness.core.verdict import Cause, TopologyFailure
from harness.launch.launch_spec import LaunchSpec
from harness.machine.port_registry import PortRegistry
from harness.topology.topology import launch
from tests.harness.faults import fault_profile

SECRET = "hf_DoNotLeakThis0123456789"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("HF_HOME", False),
        ("DYN_HTTP_PORT", False),
        ("TOKENIZERS_PARALLELISM", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_redact_and_scrub() -> None:
    env = {"HF_TOKEN": SECRET, "PATH": "/bin"}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
    assert scrub_text(f"argv: --token {SECRET} done", env) == f"argv: --token {REDACTED} done"


def test_a_secret_in_a_role_log_stays_out_of_the_verdict(tmp_path: Path) -> None:
    # The real mocker rejects an unknown flag and echoes it into its log: the secret is in the log.
    profile = fault_profile("mocker", launcher_args=["--", "--no-such-flag", SECRET])
    env = {**os.environ, "HF_TOKEN": SECRET}
    spec = LaunchSpec.of(profile, "cpu", profile.cases[0])
    topo = launch(spec, registry=PortRegistry(tmp_path / "p.json"), base_env=env)
    with pytest.raises(TopologyFailure) as err, topo:
        pass
    assert err.value.cause == Cause.ROLE_EXITED
    log = topo.deployment.roles.log_path("worker")
    assert SECRET in log.read_text()  # the fault really carried it
    everything = err.value.report() + json.dumps(err.value.evidence.as_dict(), default=str)
    everything += json.dumps(topo.plan.describe(), default=str)
    assert SECRET not in everything
    assert REDACTED in err.value.evidence.log_tail
