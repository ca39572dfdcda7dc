"""A streamed chat request held open: the worker that took it stays busy until it is closed.

Closing the stream before it ends makes Dynamo's frontend cancel the request ("Stream closed
unexpectedly; issuing cancellation"): measured on the CPU tier, the worker's in-flight gauge
was back to 0 within 0.2 s of the close."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import requests


class HeldRequest:
    """POSTs `body` streamed and returns once the first chunk arrived (the worker that took it is
    decoding it, its request counter already moved) or the answer was not a stream (`status`).
    A thread drains the stream; `finished` says it ended by itself before `close`."""

    def __init__(
        self,
        http: requests.Session,
        url: str,
        body: dict[str, Any],
        timeout_s: float,
        held_for: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        self._opened = time.monotonic()
        self._held_for = held_for  # told how long it was open, once closed
        self._closing = threading.Event()
        self._ended = threading.Event()
        self._first = threading.Event()
        self.response = http.post(
            url, json={**body, "stream": True}, stream=True, timeout=timeout_s
        )
        self.status = self.response.status_code
        if self.status != 200:
            self.response.close()
            self._ended.set()
            return
        self._drain = threading.Thread(target=self._read, name="held-request", daemon=True)
        self._drain.start()
        self._first.wait(timeout_s)

    def _read(self) -> None:
        try:
            for line in self.response.iter_lines():
                if line:
                    self._first.set()
        except (requests.RequestException, OSError, AttributeError):
            pass  # the close below cut the stream (urllib3 may drop its fp mid-read)
        finally:
            if not self._closing.is_set():
                self._ended.set()
            self._first.set()

    @property
    def finished(self) -> bool:
        """The stream ended by itself (the request was answered whole) before `close`."""
        return self._ended.is_set()

    def close(self) -> None:
        self._closing.set()
        if self.status == 200:
            # wakes the drain's pending read (urllib3 >= 2.3); a stream that ended has already
            # given its connection back to the pool
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                self.response.raw.shutdown()
            self._drain.join()
        self.response.close()
        self._held_for(time.monotonic() - self._opened)

    def __enter__(self) -> HeldRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
