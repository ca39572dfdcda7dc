"""Temporarily handling Ctrl-C and SIGTERM: install handlers for a block, restore them after."""

from __future__ import annotations

import contextlib
import signal
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
