"""A failure in the failing process's own words (harness/topology/own_words.py), read from logs
shaped as upstream's processes write them (tests/harness/logs/): the exception line and the frame
that raised it, the engine core's own line behind a wrapper, a launcher's own error line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.core.verdict import Cause
from harness.topology.deployments import Launched
from harness.topology.own_words import own_words, own_words_in
from harness.topology.topology import POLL_S, Topology
from tests.harness.faults import Clock, fault_profile, run_fault

LOGS = Path(__file__).with_name("logs")


@pytest.mark.parametrize(
    ("log", "line", "frame"),
    [
        # SGLang's scheduler raised, its crash handler killed the role (137): the cause, not
        # the cancelled task the other process logged after it
        (
            "sglang_scheduler_killed.log",
            "RuntimeError: Insufficient multimodal embedding length: "
            "num_mm_tokens_in_input_ids=17 vs num_mm_tokens_in_embedding=16",
            "schedule_batch.py:612, in prepare_for_extend",
        ),
        # vLLM's output handler, each traceback line logged with its prefix: the first of the
        # chain (the connector's device), not the EngineDeadError it caused nor a frame
        (
            "vllm_connector_device.log",
            "AssertionError: Torch not compiled with CUDA enabled",
            "__init__.py:403, in _lazy_init",
        ),
        # the engine core refused the dtype; the worker's own traceback is the wrapper
        (
            "vllm_engine_core_refusal.log",
            "NotImplementedError: \"causal_conv1d_fwd_kernel_impl\" not implemented for 'Float'",
            "causal_conv1d.py:40, in causal_conv1d_fn",
        ),
        # a launcher that refuses before starting any role: its own line
        (
            "xpu_router_launcher.log",
            "ERROR: ZE_AFFINITY_MASK must have at least 2 comma-separated values (got 0)",
            None,
        ),
    ],
)
def test_each_failure_is_named_in_its_own_words(log: str, line: str, frame: str | None) -> None:
    words = own_words_in(LOGS / log)
    assert words is not None
    assert (words.line, words.frame) == (line, frame)
    assert str(words).startswith(line)


def test_a_wrapper_points_at_the_engine_cores_own_line() -> None:
    text = (
        "(EngineCore pid=7) ERROR 12-05 09:01:02 [core.py:1] ValueError: bad dtype\n"
        "Traceback (most recent call last):\n"
        '  File "main.py", line 3, in init\n'
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    words = own_words(text)
    assert words is not None and words.line == "ValueError: bad dtype"
    assert words.frame == "its engine core"


def test_a_log_without_a_failure_says_nothing() -> None:
    assert own_words("INFO ready\nINFO serving\n") is None
    assert own_words_in(LOGS / "no-such.log") is None


ZE = "ZE_AFFINITY_MASK must have at least 2 comma-separated values (got 0)"
SHORT = "Insufficient multimodal embedding length: num_mm_tokens_in_input_ids=17 vs 16"
DOUBLES = Path(__file__).with_name("role_doubles.py")
RAISED_AT = 1 + DOUBLES.read_text().splitlines().index("    raise RuntimeError(message)")


@pytest.mark.parametrize(
    ("flags", "cause", "role", "words"),
    [
        # upstream's XPU router launcher: refuses once our event broker runs; the broker, not a
        # role of the profile, is stopped by its trap: the launcher is named, in its words
        (["--refuse", ZE], Cause.LAUNCHER_EXITED, "launcher", f"ERROR: {ZE}"),
        # a role whose traceback ends in an exception line: the line and the frame
        (
            ["--worker-raises", SHORT],
            Cause.ROLE_EXITED,
            "worker",
            f"RuntimeError: {SHORT} (role_doubles.py:{RAISED_AT}, in prepare_for_extend)",
        ),
        # an engine's crash handler kills the role (137): the error that started it
        (
            ["--worker-crash-handler", SHORT],
            Cause.ROLE_EXITED,
            "worker",
            f"RuntimeError: {SHORT} (role_doubles.py:{RAISED_AT}, in prepare_for_extend)",
        ),
        # a checkout's launcher: the worker raises, the exit trap stops the frontend, and no
        # exit order is recorded: the worker, in its words, not the silent frontend
        (
            ["--as-a-checkout", "--worker-raises", SHORT],
            Cause.ROLE_EXITED,
            "worker",
            f"RuntimeError: {SHORT} (role_doubles.py:{RAISED_AT}, in prepare_for_extend)",
        ),
    ],
    ids=[
        "launcher_refuses",
        "role_raises",
        "crash_handler_kills_its_role",
        "checkout_trap_stops_the_frontend",
    ],
)
def test_a_real_failure_is_named_in_the_failing_processs_words(
    flags: list[str], cause: Cause, role: str, words: str
) -> None:
    run = run_fault(fault_profile("mocker", flags))
    assert run.failure is not None and run.cause == cause, run.failure
    message = run.failure.message
    print(f"\n{message}")
    assert run.failure.evidence.role == role, message
    assert message.endswith(words), message
    assert not run.leftovers and not run.listening


def test_a_failed_role_site_is_the_harnesss_fault_in_pythons_words(tmp_path: Path) -> None:
    """A tap directory that is a file: the real role site raises on import, Python says 'Error
    in sitecustomize' and runs the worker on without it. Named at once as the harness's fault."""
    taken = tmp_path / "tap"
    taken.write_text("a file where the tap's directory should be\n")

    def serving(topo: Topology[Launched], clock: Clock) -> None:  # as a case's requests do
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            topo.watch()
            time.sleep(POLL_S)

    flags = ["--worker-env", f"HARNESS_ENCODER_TAP={taken}"]
    run = run_fault(fault_profile("mocker", flags), serving)
    assert run.failure is not None and run.cause == Cause.HARNESS_FAULT, run.failure
    message = run.failure.message
    print(f"\n{message}")
    assert run.failure.evidence.role == "worker"
    assert "Error in sitecustomize" in message and "FileExistsError" in message, message
    assert not run.leftovers and not run.listening
