import base64
import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from harness.payloads.media import (
    GREEN_SQUARE_NAME,
    SQUARE_RGB,
    VIDEO_FRAMES,
    VIDEO_HEIGHT,
    VIDEO_WIDTH,
    build_media,
    data_url,
    green_square_png,
)


@pytest.fixture(scope="module")
def media_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first = tmp_path_factory.mktemp("media_a")
    second = tmp_path_factory.mktemp("media_b")
    build_media(first)
    build_media(second)
    return first, second


def read_frames(path: Path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), f"cv2 cannot open {path}"
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def test_builds_are_byte_identical(media_dirs: tuple[Path, Path]) -> None:
    first, second = media_dirs
    names = sorted(p.name for p in first.iterdir())
    assert names == ["circle.mp4", "green_square.png", "red_square.png", "triangle.mp4"]
    assert sorted(p.name for p in second.iterdir()) == names
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_rebuild_is_idempotent_and_repairs_a_damaged_file(tmp_path: Path) -> None:
    path = green_square_png(tmp_path)
    original = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    assert green_square_png(tmp_path) == path
    assert path.stat().st_mtime_ns == mtime  # unchanged bytes are not rewritten
    path.write_bytes(b"broken")
    green_square_png(tmp_path)
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == [GREEN_SQUARE_NAME]  # no temp files left


def test_png_is_512_square_with_green_centre(media_dirs: tuple[Path, Path]) -> None:
    with Image.open(media_dirs[0] / "green_square.png") as image:
        assert image.format == "PNG"
        assert image.size == (512, 512)
        rgb = image.convert("RGB")
        assert rgb.getpixel((256, 256)) == SQUARE_RGB
        assert rgb.getpixel((5, 5)) == (255, 255, 255)
        # The label puts dark pixels inside the square.
        square = np.asarray(rgb)[128:384, 128:384]
        assert (square.sum(axis=2) < 120).sum() > 500


def test_video_frame_count_and_size(media_dirs: tuple[Path, Path]) -> None:
    frames = read_frames(media_dirs[0] / "triangle.mp4")
    assert len(frames) == VIDEO_FRAMES
    assert all(frame.shape == (VIDEO_HEIGHT, VIDEO_WIDTH, 3) for frame in frames)


def test_triangle_moves_left_to_right(media_dirs: tuple[Path, Path]) -> None:
    centroids = []
    for frame in read_frames(media_dirs[0] / "triangle.mp4"):
        blue, green, red = frame[..., 0].astype(int), frame[..., 1], frame[..., 2]
        yellow = (red > 180) & (green > 180) & (blue < 100)
        assert yellow.sum() > 500, "triangle not visible"
        centroids.append(float(np.nonzero(yellow)[1].mean()))
    assert all(b > a + 5 for a, b in itertools.pairwise(centroids)), centroids
    assert centroids[0] < VIDEO_WIDTH / 3 < 2 * VIDEO_WIDTH / 3 < centroids[-1]


def test_data_url_has_mime_and_decodes_to_file(media_dirs: tuple[Path, Path]) -> None:
    png = media_dirs[0] / "green_square.png"
    mp4 = media_dirs[0] / "triangle.mp4"
    png_url = data_url(png)
    assert png_url.startswith("data:image/png;base64,")
    assert base64.b64decode(png_url.split(",", 1)[1]) == png.read_bytes()
    assert data_url(mp4).startswith("data:video/mp4;base64,")
