"""The test media the requests carry: generated deterministically, and served over local HTTP.

- `build_media`: deterministic generated test media (image and video, each with its other: the
  red square, the moving circle) written into a directory. Every builder is idempotent: it
  renders the media, and writes the file only when the bytes on disk differ (atomically, via a
  temporary file and ``os.replace``), so concurrent workers and repeated calls converge on the
  same file. Same library versions give byte-identical output.
- `AssetServer`: a local HTTP server for test media that honours Range requests (media routing
  probes sizes)."""

from __future__ import annotations

import base64
import io
import mimetypes
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, unquote, urlsplit

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

GREEN_SQUARE_NAME = "green_square.png"
RED_SQUARE_NAME = "red_square.png"  # the other image: the same scene, another colour
TRIANGLE_VIDEO_NAME = "triangle.mp4"
CIRCLE_VIDEO_NAME = "circle.mp4"  # the other video: another shape and colour, same motion

IMAGE_SIZE = 512
SQUARE_SIZE = 256
SQUARE_RGB = (0, 170, 0)
RED_SQUARE_RGB = (200, 0, 0)
LABEL_RGB = (20, 20, 20)
LABEL_FONT_SIZE = 56

VIDEO_WIDTH = 320
VIDEO_HEIGHT = 240
VIDEO_FRAMES = 10
VIDEO_FPS = 5
VIDEO_FOURCC = "mp4v"  # MPEG-4 Part 2: decodes in OpenCV and every ffmpeg-based loader (PyAV).
BACKGROUND_BGR = (40, 30, 30)
TRIANGLE_BGR = (0, 255, 255)  # yellow
TRIANGLE_HALF_WIDTH = 40
TRIANGLE_HEIGHT = 80
CIRCLE_BGR = (255, 255, 0)  # cyan
CIRCLE_RADIUS = 40

MIME_BY_SUFFIX = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
}


@dataclass(frozen=True)
class MediaSet:
    """Paths of the generated media of one directory: each medium and its other (a different
    picture of the same kind, for the metamorphic checks)."""

    green_square_png: Path
    triangle_video_mp4: Path
    red_square_png: Path
    circle_video_mp4: Path


def _write_if_changed(path: Path, content: bytes) -> Path:
    """Write ``content`` to ``path`` atomically unless the file already holds exactly it."""
    if path.is_file() and path.read_bytes() == content:
        return path
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp_file:
            tmp_file.write(content)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def render_green_square_png() -> bytes:
    """512x512 white canvas, a centred green square labelled "GREEN" in dark text, as PNG."""
    return render_square_png(SQUARE_RGB, "GREEN")


def render_square_png(rgb: tuple[int, int, int], label: str) -> bytes:
    """512x512 white canvas, a centred square of `rgb` labelled `label` in dark text, as PNG."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    top_left = (IMAGE_SIZE - SQUARE_SIZE) // 2
    bottom_right = top_left + SQUARE_SIZE - 1
    draw.rectangle((top_left, top_left, bottom_right, bottom_right), fill=rgb)
    font = ImageFont.load_default(size=LABEL_FONT_SIZE)
    centre = IMAGE_SIZE // 2
    # The label sits in the lower part of the square so the centre pixel keeps the colour.
    label_y = top_left + SQUARE_SIZE * 3 // 4
    draw.text((centre, label_y), label, fill=LABEL_RGB, font=font, anchor="mm")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def green_square_png(directory: Path) -> Path:
    """Write the green-square PNG into ``directory`` (created if missing); return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    return _write_if_changed(directory / GREEN_SQUARE_NAME, render_green_square_png())


def red_square_png(directory: Path) -> Path:
    """Write the red-square PNG (the other image) into ``directory``; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    return _write_if_changed(directory / RED_SQUARE_NAME, render_square_png(RED_SQUARE_RGB, "RED"))


def _centre_x(index: int, half_width: int) -> int:
    travel = VIDEO_WIDTH - 2 * half_width - 20
    return 10 + half_width + travel * index // (VIDEO_FRAMES - 1)


def circle_frame(index: int) -> np.ndarray:
    """BGR frame ``index`` of the other video: a cyan circle, further right on each frame."""
    frame: np.ndarray = np.empty((VIDEO_HEIGHT, VIDEO_WIDTH, 3), dtype=np.uint8)
    frame[:] = BACKGROUND_BGR
    centre = (_centre_x(index, CIRCLE_RADIUS), VIDEO_HEIGHT // 2)
    cv2.circle(frame, centre, CIRCLE_RADIUS, CIRCLE_BGR, thickness=-1)
    return frame


def triangle_frame(index: int) -> np.ndarray:
    """BGR frame ``index`` of the video: a yellow triangle, further right on each frame."""
    frame: np.ndarray = np.empty((VIDEO_HEIGHT, VIDEO_WIDTH, 3), dtype=np.uint8)
    frame[:] = BACKGROUND_BGR
    centre_x = _centre_x(index, TRIANGLE_HALF_WIDTH)
    base_y = VIDEO_HEIGHT // 2 + TRIANGLE_HEIGHT // 2
    corners = np.array(
        [
            [centre_x - TRIANGLE_HALF_WIDTH, base_y],
            [centre_x + TRIANGLE_HALF_WIDTH, base_y],
            [centre_x, base_y - TRIANGLE_HEIGHT],
        ],
        dtype=np.int32,
    )
    cv2.fillPoly(frame, [corners], TRIANGLE_BGR)
    return frame


def triangle_video_mp4(directory: Path) -> Path:
    """Write the 10-frame, 5 fps, 320x240 'mp4v' triangle video into ``directory``."""
    return _video_mp4(directory, TRIANGLE_VIDEO_NAME, triangle_frame)


def circle_video_mp4(directory: Path) -> Path:
    """Write the other video (a moving circle, same size, rate and length) into ``directory``."""
    return _video_mp4(directory, CIRCLE_VIDEO_NAME, circle_frame)


def _video_mp4(directory: Path, name: str, frame_at: Callable[[int], np.ndarray]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{Path(name).stem}.", suffix=".mp4")
    os.close(fd)
    tmp_path = Path(tmp_name)
    try:
        writer = cv2.VideoWriter(
            str(tmp_path),
            cv2.VideoWriter.fourcc(*VIDEO_FOURCC),
            VIDEO_FPS,
            (VIDEO_WIDTH, VIDEO_HEIGHT),
        )
        if not writer.isOpened():
            raise RuntimeError(
                f"OpenCV cannot write {VIDEO_FOURCC!r} mp4 to {tmp_path}; "
                "install opencv-python-headless with FFMPEG support"
            )
        try:
            for index in range(VIDEO_FRAMES):
                writer.write(frame_at(index))
        finally:
            writer.release()
        return _write_if_changed(directory / name, tmp_path.read_bytes())
    finally:
        tmp_path.unlink(missing_ok=True)


def build_media(directory: Path) -> MediaSet:
    """Generate every test medium into ``directory``."""
    return MediaSet(
        green_square_png=green_square_png(directory),
        triangle_video_mp4=triangle_video_mp4(directory),
        red_square_png=red_square_png(directory),
        circle_video_mp4=circle_video_mp4(directory),
    )


def mime_type(path: Path) -> str:
    """MIME type of a media file by suffix, e.g. ``image/png`` for ``a.PNG``."""
    suffix = path.suffix.lower()
    if suffix in MIME_BY_SUFFIX:
        return MIME_BY_SUFFIX[suffix]
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def data_url(path: Path) -> str:
    """``data:<mime>;base64,<payload>`` URL of a file, e.g. ``data:image/png;base64,iVBO...``."""
    payload = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:{mime_type(path)};base64,{payload}"


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
