"""Log tails in failure evidence: colour codes stripped, the harness's own /health-poll 503 lines
folded into one note so the lines that explain a failure stay in view. Lines as Dynamo 1.6.1
writes them."""

from __future__ import annotations

from pathlib import Path

from harness.topology.log_tail import tail

POLL = (
    "\x1b[2m2026-11-29T21:34:07.229612Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2mtower_http::trace::"
    "on_failure\x1b[0m\x1b[2m:\x1b[0m response failed \x1b[3mclassification\x1b[0m\x1b[2m=\x1b[0m"
    "Status code: 503 Service Unavailable \x1b[3mlatency\x1b[0m\x1b[2m=\x1b[0m0 ms"
)
OTHER_503 = "frontend: upstream answered Status code: 503 Service Unavailable"


def write_log(tmp_path: Path, lines: list[str]) -> Path:
    log = tmp_path / "encode.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_polls_fold_into_one_note_and_colour_is_stripped(tmp_path: Path) -> None:
    lines = ["start", POLL, "loading", *[POLL] * 40, "\x1b[31mERROR\x1b[0m real cause", "end"]
    log = write_log(tmp_path, lines)
    assert tail(log, 30).splitlines() == [
        "start",
        "loading",
        "[41 x '503 Service Unavailable' lines from the harness's /health polls, elided]",
        "ERROR real cause",
        "end",
    ]
    assert tail(log, 2).splitlines() == ["ERROR real cause", "end"]


def test_a_log_without_polls_is_only_uncoloured(tmp_path: Path) -> None:
    log = write_log(tmp_path, ["a", OTHER_503, "\x1b[1mb\x1b[0m"])
    assert tail(log).splitlines() == ["a", OTHER_503, "b"]


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    assert tail(tmp_path / "nope.log") == f"(no log at {tmp_path / 'nope.log'})"


# What the SGLang E/PD PD worker logs when NIXL cannot take the embeddings it is sent (as the
# harness saw it on the CPU tier before the role adapter gave SGLang local transfer).
RDMA_TRACEBACK = """\x1b[2m2026-12-03T10:00:00Z\x1b[0m ERROR worker_handler: generate failed
Traceback (most recent call last):
  File "/x/dynamo/common/multimodal/embedding_transfer.py", line 88, in receive_embeddings
    metadata = RdmaMetadata.model_validate(raw)
pydantic_core._pydantic_core.ValidationError: 1 validation error for RdmaMetadata
descriptors
  Field required [type=missing, input_value={}, input_type=dict]
"""


def test_a_5xx_names_the_role_that_logged_the_exception_and_quotes_its_line(
    tmp_path: Path,
) -> None:
    """A request answered 5xx: the failure names the role whose log last ended a Python
    traceback, and quotes the exception line; its log tail is the evidence."""
    import os
    import time

    from harness.core.verdict import Cause
    from harness.topology.deployments import Launched
    from harness.topology.topology import Topology
    from tests.harness.test_plan import PROFILES, plan_for

    plan = plan_for(PROFILES["sglang_e_pd_qwen3-vl-2b"])
    plan = type(plan)(**{**plan.__dict__, "run_dir": tmp_path})
    plan.log_dir.mkdir(parents=True)
    (plan.log_dir / "encode.log").write_text(
        "Traceback (most recent call last):\n  File 'a.py'\nKeyError: 'old'\n"
    )
    old = time.time() - 60
    os.utime(plan.log_dir / "encode.log", (old, old))
    (plan.log_dir / "pd.log").write_text(RDMA_TRACEBACK)
    topo = Topology(plan, [], Launched(plan))
    failure = topo.failure(Cause.HTTP_ERROR, "warm-up request answered HTTP 500 3 times")
    assert failure.evidence.role == "pd"
    assert failure.message.endswith(
        "role 'pd' logged: pydantic_core._pydantic_core.ValidationError: 1 validation error "
        "for RdmaMetadata (embedding_transfer.py:88, in receive_embeddings)"
    ), failure.message
    assert "receive_embeddings" in failure.evidence.log_tail
    assert topo.failure(Cause.WRONG_ANSWER, "x").evidence.role is None  # not for other causes


def test_an_exit_code_written_just_after_the_role_died_is_read(tmp_path: Path) -> None:
    """The launcher writes NAME.exit as its `wait -n` returns, after the pid is gone: the
    diagnosis that saw the death first waits for the record (CI read 'code unknown' without)."""
    import threading
    from types import SimpleNamespace
    from typing import cast

    from harness.launch.plan import LaunchPlan
    from harness.topology.roles import RoleTable

    roles = RoleTable(cast(LaunchPlan, SimpleNamespace(log_dir=tmp_path)))  # only its log_dir
    assert roles.exit_code("worker") is None
    writer = threading.Timer(0.3, lambda: (tmp_path / "worker.exit").write_text("2\n"))
    writer.start()
    assert roles.exit_code("worker") is None  # what a bare read saw
    assert roles.recorded_exit_code("worker") == 2
    writer.join()
    assert roles.recorded_exit_code("encode", grace_s=0.1) is None  # none written: no hang
