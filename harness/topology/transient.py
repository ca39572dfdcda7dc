"""Start-up failures that are known to pass on a second try, in one table with where each comes
from: a launch that fails before it is ready with one of them is started again, at most
`MAX_RETRIES` times, each retry named in the result, the end summary and the report.

Only what upstream's own GPU runs retry, read from its parallel scheduler
(tests/utils/pytest_parallel_gpu.py, ../shared/notes/upstream-tests.md "Retries upstream
applies"): the GPU tier's memory profiling racing another test for a card, an engine core that
failed to initialise, a worker that exited with 0, -15 or -9 while the harness waited for its
health. "Free memory on device" also shows in healthy runs (upstream's reviewers said so), so it
counts only together with the worker's exit. A wrong answer, a missing health source, a model that
never registered, a port fault or a launcher the harness refused is never retried: those are the
faults the suite exists to name. The CPU tier retries nothing: no transient start-up failure has
been measured there (a repeat of the pre_merge ids and the routers, bench/repeat.py), and a line
earns a place here only with one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.core.verdict import Cause, TopologyFailure
from harness.profiles import Tier

MAX_RETRIES = 2  # upstream's scheduler retries a test up to 3 times in all
UPSTREAM = "upstream's tests/utils/pytest_parallel_gpu.py (../shared/notes/upstream-tests.md)"


@dataclass(frozen=True)
class TransientStart:
    """One known transient start-up failure: the log text that shows it, the tiers it applies
    on, whether it counts only with the role's exit, and where it comes from."""

    text: re.Pattern[str] | None  # None: the exit alone says it
    tiers: tuple[Tier, ...]
    source: str
    with_exit: bool = False  # only where the failure is a role's exit (cause role_exited)
    exit_codes: tuple[int, ...] = ()  # only a role's exit with one of these codes

    def matches(self, failure: TopologyFailure, logs: str) -> bool:
        exited = failure.cause == Cause.ROLE_EXITED
        if self.exit_codes and not (exited and failure.evidence.exit_code in self.exit_codes):
            return False
        if self.with_exit and not exited:
            return False
        return self.text is None or bool(self.text.search(logs))

    def describe(self) -> str:
        said = f"'{self.text.pattern}' in its logs" if self.text else "no log line"
        codes = f", exit code in {list(self.exit_codes)}" if self.exit_codes else ""
        return f"{said}{' with the role exited' if self.with_exit else ''}{codes}"


TRANSIENT_STARTS: tuple[TransientStart, ...] = (
    TransientStart(re.compile(r"Error in memory profiling"), ("gpu",), UPSTREAM),
    TransientStart(re.compile(r"Free memory on device"), ("gpu",), UPSTREAM, with_exit=True),
    TransientStart(re.compile(r"Engine core initialization failed"), ("gpu",), UPSTREAM),
    # a worker that exits 0, or is killed by SIGTERM or SIGKILL (-15, -9; as a shell reports
    # them, 143 and 137) while the harness waits for its health
    TransientStart(None, ("gpu",), UPSTREAM, exit_codes=(0, -15, -9, 143, 137)),
)
# what a retry never covers, whatever the logs say: the faults the suite names
NEVER_RETRIED = frozenset(
    {
        Cause.WRONG_ANSWER,
        Cause.WRONG_PATH,
        Cause.NO_HEALTH_SOURCE,
        Cause.NEVER_REGISTERED,
        Cause.PORT_IN_USE,
        Cause.LAUNCHER_INVALID,
        Cause.EXPOSED_LISTENER,
        Cause.ROLE_NOT_STARTED,
    }
)


def transient(
    failure: TopologyFailure,
    logs: str,
    tier: Tier,
    table: Sequence[TransientStart] = TRANSIENT_STARTS,
) -> TransientStart | None:
    """The table's line this start-up failure matches on this tier, if any."""
    if failure.cause in NEVER_RETRIED:
        return None
    return next(
        (line for line in table if tier in line.tiers and line.matches(failure, logs)), None
    )
