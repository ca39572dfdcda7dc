"""Deterministic generated test media (image and video) written into a directory.

Every builder is idempotent: it renders the media, and writes the file only when the bytes on
disk differ (atomically, via a temporary file and ``os.replace``), so concurrent workers and
repeated calls converge on the same file. Same library versions give byte-identical output.
"""

from __future__ import annotations

import base64
import io
import mimetypes
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
    frame = np.empty((VIDEO_HEIGHT, VIDEO_WIDTH, 3), dtype=np.uint8)
    frame[:] = BACKGROUND_BGR
    centre = (_centre_x(index, CIRCLE_RADIUS), VIDEO_HEIGHT // 2)
    cv2.circle(frame, centre, CIRCLE_RADIUS, CIRCLE_BGR, thickness=-1)
    return frame


def triangle_frame(index: int) -> np.ndarray:
    """BGR frame ``index`` of the video: a yellow triangle, further right on each frame."""
    frame = np.empty((VIDEO_HEIGHT, VIDEO_WIDTH, 3), dtype=np.uint8)
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
            cv2.VideoWriter_fourcc(*VIDEO_FOURCC),
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
