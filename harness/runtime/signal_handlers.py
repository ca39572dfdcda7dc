"""Temporarily handling Ctrl-C and SIGTERM: install handlers for a block, restore them after."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, Any], Any] | int


@contextlib.contextmanager
def handling(handler: Handler, signals: tuple[int, ...] = INTERRUPTS) -> Iterator[None]:
    """`handler` (a function, SIG_IGN or SIG_DFL) for `signals` inside the block only."""
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM handled like Ctrl-C: raise KeyboardInterrupt so the same cleanup runs."""
    raise KeyboardInterrupt(f"signal {signum}")


def term_raises_interrupt() -> Callable[[], None]:
    """While SIGTERM would kill this process outright (default handler, main thread), make it
    raise KeyboardInterrupt instead, so the `with` blocks that started processes stop them.
    Returns the function that puts the default back (a no-op if nothing was changed)."""
    in_main = threading.current_thread() is threading.main_thread()
    if not in_main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, raise_interrupt)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is raise_interrupt:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return restore
