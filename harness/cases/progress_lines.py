"""The progress lines a person can follow through a long serve run: a case's outcome line
(`case_line`), numbered with an ETA (`ProgressCount`), and the lines said after a case ended
(plugin/progress.py writes them through pytest's terminal reporter, relayed from xdist workers)."""

from __future__ import annotations

PROPERTY = "serve-harness progress"
PREFIX = "[serve] "
CASE_MARK = "\x00case "  # a case's outcome line: its writer numbers it and adds the ETA
# A line about what happened after a case ended (its launch torn down in the case's teardown):
# written after that case's outcome line, which is only final once its teardown is done.
AFTER_CASE = "\x00after "


def case_line(test_id: str, outcome: str, cause: str | None, seconds: float) -> str:
    """A case's outcome line as said; `ProgressCount.number` gives it `[n/N]` and the ETA."""
    tail = f" ({cause})" if cause else ""
    return f"{CASE_MARK}{test_id}\t{outcome}{tail}, {seconds:.1f} s\t{seconds}"


class ProgressCount:
    """`[n/N]` and an ETA for the cases of a run, where its lines are written: the ETA is what
    the cases left took in earlier runs (`--durations-from`), else the mean of this run's."""

    def __init__(self, ids: list[str], recorded: dict[str, float]) -> None:
        self.left = list(ids)
        self.total = len(ids)
        self.recorded = recorded
        self.seconds: list[float] = []
        self.waiting: list[str] = []  # AFTER_CASE lines waiting for their case's outcome line

    def lines(self, line: str) -> list[str]:
        """What to write for one said line, in the order things happened: a case's outcome
        line numbered, then the lines held for after it; an AFTER_CASE line held."""
        if line.startswith(AFTER_CASE):
            self.waiting.append(line.removeprefix(AFTER_CASE))
            return []
        if not line.startswith(CASE_MARK):
            return [line]
        out, self.waiting = [self.number(line), *self.waiting], []
        return out

    def flush(self) -> list[str]:
        """The lines still held at the end of the run (the last launch's teardown)."""
        out, self.waiting = self.waiting, []
        return out

    def number(self, line: str) -> str:
        if not line.startswith(CASE_MARK):
            return line
        test_id, shown, seconds = line.removeprefix(CASE_MARK).split("\t")
        if not self.total:  # an xdist controller collects nothing: no count to give
            return f"{test_id}: {shown}"
        if test_id in self.left:
            self.left.remove(test_id)
        self.seconds.append(float(seconds))
        done = self.total - len(self.left)
        mean = sum(self.seconds) / len(self.seconds)
        eta = sum(self.recorded.get(t, mean) for t in self.left)
        after = f"; ETA {eta // 60:.0f} min {eta % 60:02.0f} s" if self.left else ""
        return f"[{done}/{self.total}] {test_id}: {shown}{after}"
