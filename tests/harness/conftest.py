"""Fixtures several harness tests share."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.payloads.chat import MediaURLs
from harness.payloads.media import AssetServer, build_media


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[MediaURLs]:
    """The generated media (green/red square, triangle/circle video) behind a live asset server
    on 127.0.0.1, as the serve suite sends them; a test may change the files it serves."""
    media = build_media(tmp_path / "media")
    with AssetServer(media.green_square_png.parent) as server:
        yield MediaURLs.serve(server, media)


def pytest_configure(config: pytest.Config) -> None:
    """A shell starts a background job (`cmd &`, or CI's runner) with SIGINT ignored, and exec
    keeps it ignored: the children the interrupt tests Ctrl-C would never see the signal (the
    three interrupt tests failed so on a backgrounded `.ci/run`). Take SIGINT as a terminal's
    foreground job does; the children then start with the default."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadgroup` (scripts/self-test): every test that launches real
    engines runs on one worker, one after another (a 2-core box runs one topology at a time);
    the rest spread over the other workers meanwhile."""
    for item in items:
        if item.get_closest_marker("heavy"):
            item.add_marker(pytest.mark.xdist_group("heavy"))
