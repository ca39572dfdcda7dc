"""Local HTTP server for test media that honours Range requests (media routing probes sizes)."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, unquote, urlsplit

from harness.judging.media import mime_type

HOST = "127.0.0.1"
_SINGLE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class UnsatisfiableRange(Exception):
    """A syntactically valid Range that selects no byte of the file (answered with 416)."""


@dataclass(frozen=True)
class ServedRequest:
    """One answered request, kept as evidence: URL path, raw Range header, status code."""

    path: str
    range: str | None
    status: int


class ServedLog:
    """Thread-safe, append-only list of answered requests."""

    def __init__(self) -> None:
        self._requests: list[ServedRequest] = []
        self._lock = threading.Lock()

    def append(self, request: ServedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def snapshot(self) -> list[ServedRequest]:
        with self._lock:
            return list(self._requests)


def parse_byte_range(header: str, size: int) -> tuple[int, int] | None:
    """Inclusive ``(first, last)`` byte positions selected by a Range header, or None for "send
    the whole file" (malformed or multi-range headers are ignored, as RFC 9110 allows).

    Examples for a 100-byte file: ``bytes=0-9`` -> (0, 9); ``bytes=90-`` -> (90, 99);
    ``bytes=-10`` -> (90, 99); ``bytes=50-500`` -> (50, 99); ``bytes=100-`` raises
    UnsatisfiableRange; ``items=0-1`` -> None.
    """
    match = _SINGLE_RANGE.match(header.strip())
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        return None
    if not first_text:
        suffix_length = int(last_text)
        if suffix_length == 0 or size == 0:
            raise UnsatisfiableRange(header)
        return max(size - suffix_length, 0), size - 1
    first = int(first_text)
    last = int(last_text) if last_text else size - 1
    if last_text and last < first:
        return None
    if first >= size:
        raise UnsatisfiableRange(header)
    return first, min(last, size - 1)


class _AssetRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _AssetHTTPServer

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: requests are recorded in ``AssetServer.served`` instead."""

    def _answer(self, send_body: bool) -> None:
        range_header = self.headers.get("Range")
        url_path = urlsplit(self.path).path
        file_path = self.server.resolve(url_path)
        if file_path is None:
            self._answer_empty(HTTPStatus.NOT_FOUND, url_path, range_header)
            return
        size = file_path.stat().st_size
        try:
            byte_range = parse_byte_range(range_header, size) if range_header else None
        except UnsatisfiableRange:
            self._answer_empty(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                url_path,
                range_header,
                {"Content-Range": f"bytes */{size}"},
            )
            return
        first, last = byte_range if byte_range else (0, size - 1)
        status = HTTPStatus.PARTIAL_CONTENT if byte_range else HTTPStatus.OK
        self.send_response(status)
        self.send_header("Content-Type", mime_type(file_path))
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Accept-Ranges", "bytes")
        if byte_range:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        # Recorded before end_headers flushes the reply, so a client that has its answer
        # always finds the request in the log.
        self.server.record(ServedRequest(url_path, range_header, int(status)))
        self.end_headers()
        if send_body and last >= first:
            self._send_bytes(file_path, first, last - first + 1)

    def _answer_empty(
        self,
        status: HTTPStatus,
        url_path: str,
        range_header: str | None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.server.record(ServedRequest(url_path, range_header, int(status)))
        self.end_headers()

    def _send_bytes(self, file_path: Path, offset: int, length: int) -> None:
        try:
            with file_path.open("rb") as source:
                source.seek(offset)
                remaining = length
                while remaining > 0:
                    chunk = source.read(min(remaining, 64 * 1024))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    remaining -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # A prober read the head and hung up; that is fine.


class _AssetHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, port: int, log: ServedLog) -> None:
        self.root = root.resolve()
        self.log = log
        super().__init__((HOST, port), _AssetRequestHandler)

    def resolve(self, url_path: str) -> Path | None:
        """Regular file under root named by a URL path, or None (missing, directory, outside)."""
        relative = unquote(url_path).lstrip("/")
        if not relative or "\x00" in relative:
            return None
        candidate = (self.root / relative).resolve()
        if not candidate.is_relative_to(self.root) or not candidate.is_file():
            return None
        return candidate

    def record(self, request: ServedRequest) -> None:
        self.log.append(request)


class AssetServer:
    """Serves files under ``root`` on 127.0.0.1 with Range support, as a context manager.

    ``port=0`` lets the OS choose; pass a leased port to use that one.

        with AssetServer(media_dir) as assets:
            url = assets.url_for("green_square.png")  # http://127.0.0.1:41234/green_square.png
    """

    def __init__(self, root: Path, port: int = 0) -> None:
        if not root.is_dir():
            raise NotADirectoryError(f"asset root {root} is not a directory")
        self.root = root
        self.requested_port = port
        self._log = ServedLog()
        self._server: _AssetHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> AssetServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("asset server already started")
        self._server = _AssetHTTPServer(self.root, self.requested_port, self._log)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"asset-server-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, join the serving thread and close the listening socket."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join()
        server.server_close()
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        return self._running().server_address[1]

    @property
    def served(self) -> list[ServedRequest]:
        """Copy of the requests answered so far, oldest first (still readable after stop)."""
        return self._log.snapshot()

    def url_for(self, name: str) -> str:
        """URL of a file under root, e.g. ``url_for("triangle.mp4")``."""
        return f"http://{HOST}:{self.port}/{quote(name.lstrip('/'))}"

    def _running(self) -> _AssetHTTPServer:
        if self._server is None:
            raise RuntimeError("asset server is not running; use it inside `with AssetServer(...)`")
        return self._server
