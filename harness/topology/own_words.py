"""What a failing process said of its failure, in its own words, read from its log: the exception
line that ends its traceback (type and message) with the frame that raised it, its engine's own
error line where a wrapper hides it, or a launcher's own error line.

- `own_words(text)`: the root of the first failure in a log. A crash handler that kills its
  process tree (SGLang's `kill_process_tree`, vLLM's engine-core death) makes every other process
  of the role log a consequence after the cause (a broken pipe, a cancelled task, a dead engine);
  the cause is the earliest traceback that is not one of those, and in a chained traceback ("The
  above exception was the direct cause of …") the first exception of the chain.
- Log prefixes are stripped first: vLLM's `(EngineCore pid=1) ERROR 12-06 00:12:02 [core.py:9] `,
  Dynamo's `2026-12-06T00:12:02.1Z ERROR module: `, SGLang's `[2026-12-06 00:12:02 TP0] `: a
  traceback logged line by line reads as one printed.

Example: a log ending

    [2026-12-06 00:12:02 TP0] Scheduler hit an exception: Traceback (most recent call last):
      File "/sglang/srt/managers/scheduler.py", line 2877, in run_scheduler_process
        scheduler.event_loop_normal()
    RuntimeError: Insufficient multimodal embedding length: 17 vs 16

gives `RuntimeError: Insufficient multimodal embedding length: 17 vs 16 (scheduler.py:2877, in
run_scheduler_process)`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TRACEBACK = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# One log line's prefix, as the engines and Dynamo write them, before the text they log.
PREFIXES = (
    re.compile(r"^\((?:EngineCore|MainProcess|APIServer|Worker)[^)]*\)\s+"),  # vLLM's process
    re.compile(
        r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\]\s?"
    ),
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z\s+(?:TRACE|DEBUG|INFO|WARN|ERROR)\s+[\w.:]+:\s?"),
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[^\]]*)\]\s?"),  # SGLang's
)
FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
EXCEPTION_LINE = re.compile(
    r"^((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning|Fault)\w*)(?::\s?(.*))?$"
)
# What a process logs when another one's failure stopped it: never the cause.
CONSEQUENCES = re.compile(
    r"^(?:KeyboardInterrupt|SystemExit|asyncio\.(?:exceptions\.)?CancelledError|CancelledError|"
    r"BrokenPipeError|ConnectionResetError|ConnectionRefusedError|EOFError|"
    r"zmq\.error\.ContextTerminated|.*EngineDeadError|.*EngineGenerateError)\b"
)
# vLLM's engine core logs its cause in ERROR lines; the worker's traceback then ends in a wrapper
# that says so (vllm/v1/engine/core.py, core_client.py, 0.31).
WRAPPERS = ("See root cause above", "Engine core initialization failed")
ENGINE_CORE_ERROR = re.compile(
    r"\(EngineCore[^)]*\) ERROR .*?\] ((?:\w+\.)*\w*(?:Error|Exception)\b.*)$"
)
# A launcher's own refusal, as shell scripts print it: "ERROR: …", "error: …", "Error: …".
LAUNCHER_ERROR = re.compile(r"^\s*(?:ERROR|Error|error|FATAL|Fatal)\b:?\s+(.+)$")
SCAN_BYTES = 256_000  # of a log's end: every traceback of a failing start fits
WORDS_CHARS = 400


@dataclass(frozen=True)
class OwnWords:
    """A failure as its process put it: `line` (e.g. "KeyError: 'k'"), and where it was raised
    (`scheduler.py:2877, in run_scheduler_process`) where a traceback said."""

    line: str
    frame: str | None = None

    def __str__(self) -> str:
        where = f" ({self.frame})" if self.frame else ""
        return f"{self.line[:WORDS_CHARS]}{where}"


def unprefixed(line: str) -> str:
    line = ANSI_ESCAPE.sub("", line).rstrip()
    for prefix in PREFIXES:
        line = prefix.sub("", line, count=1)
    return line


@dataclass(frozen=True)
class Raised:
    """One exception of a traceback: its line and the last frame before it."""

    line: str
    frame: str | None
    index: int  # where it ends in the log


def tracebacks(lines: list[str]) -> list[list[Raised]]:
    """Each traceback group in the log (chained exceptions together), in log order."""
    groups: list[list[Raised]] = []
    chained = False
    frame: str | None = None
    inside = False
    for i, raw in enumerate(lines):
        line = unprefixed(raw)
        if TRACEBACK in line:
            if not chained:
                groups.append([])
            inside, frame, chained = True, None, False
            continue
        if not inside:
            if any(c in line for c in CHAINED) and groups:
                chained = True
            continue
        found = FRAME.match(line)
        if found:
            path, number, function = found.groups()
            frame = f"{Path(path).name}:{number}, in {function}"
            continue
        text = line.strip()
        if not text or line.startswith((" ", "\t")) or text.startswith("^"):
            continue
        if EXCEPTION_LINE.match(text) or ": " in text:
            groups[-1].append(Raised(text, frame, i))
            inside = False
    return [group for group in groups if group]


def own_words(text: str) -> OwnWords | None:
    """The first failure's root cause in a log (module doc); None where it shows none."""
    lines = text.splitlines()
    for group in tracebacks(lines):
        root = group[0]  # the first of a chain: what the others were raised while handling
        if CONSEQUENCES.match(root.line):
            continue
        if any(w in root.line for w in WRAPPERS):
            engine = engine_error(lines[: root.index])
            if engine is not None:
                return OwnWords(engine, "its engine core")
        return OwnWords(root.line, root.frame)
    engine = engine_error(lines)
    if engine is not None:
        return OwnWords(engine, "its engine core")
    return launcher_error(lines)


def engine_error(lines: list[str]) -> str | None:
    """The last exception line vLLM's engine core logged (its own ERROR lines)."""
    found = [
        m.group(1) for line in lines if (m := ENGINE_CORE_ERROR.search(ANSI_ESCAPE.sub("", line)))
    ]
    return found[-1] if found else None


def launcher_error(lines: list[str]) -> OwnWords | None:
    """A script's own last error line ("ERROR: ZE_AFFINITY_MASK must have at least 2 …")."""
    for raw in reversed(lines):
        found = LAUNCHER_ERROR.match(ANSI_ESCAPE.sub("", raw))
        if found:
            return OwnWords(found.group(0).strip())
    return None


def own_words_in(path: Path) -> OwnWords | None:
    """`own_words` of a log file's end (None: no file, or nothing said)."""
    try:
        data = path.read_bytes()[-SCAN_BYTES:]
    except OSError:
        return None
    return own_words(data.decode(errors="replace"))
