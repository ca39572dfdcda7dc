"""Fixtures several harness tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.judging.asset_server import AssetServer
from harness.judging.chat_request import MediaURLs
from harness.judging.media import build_media


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MediaURLs]:
    """The generated media (green/red square, triangle/circle video) behind a live asset server
    on 127.0.0.1, as the serve suite sends them."""
    media = build_media(tmp_path_factory.mktemp("media"))
    with AssetServer(media.green_square_png.parent) as server:
        yield MediaURLs.serve(server, media)
