"""Fixtures several harness tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.requests.chat import MediaURLs
from harness.requests.media import AssetServer, build_media


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[MediaURLs]:
    """The generated media (green/red square, triangle/circle video) behind a live asset server
    on 127.0.0.1, as the serve suite sends them; a test may change the files it serves."""
    media = build_media(tmp_path / "media")
    with AssetServer(media.green_square_png.parent) as server:
        yield MediaURLs.serve(server, media)
