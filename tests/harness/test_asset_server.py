import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.payloads.media import AssetServer, ServedRequest, UnsatisfiableRange, parse_byte_range

CONTENT = bytes(range(256)) * 4  # 1024 distinct-position bytes


@pytest.fixture
def asset_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "clip.mp4").write_bytes(CONTENT)
    (root / "image.png").write_bytes(b"\x89PNG fake")
    (root / "photo.jpg").write_bytes(b"\xff\xd8 fake")
    (root / "sub").mkdir()
    (tmp_path / "secret.txt").write_text("outside the root")
    return root


@pytest.fixture
def assets(asset_root: Path) -> Iterator[AssetServer]:
    with AssetServer(asset_root) as server:
        yield server


def test_full_get_with_content_type(assets: AssetServer) -> None:
    response = requests.get(assets.url_for("clip.mp4"), timeout=5)
    assert response.status_code == 200
    assert response.content == CONTENT
    assert response.headers["Content-Type"] == "video/mp4"
    assert response.headers["Accept-Ranges"] == "bytes"
    assert requests.get(assets.url_for("image.png"), timeout=5).headers["Content-Type"] == (
        "image/png"
    )
    assert requests.get(assets.url_for("photo.jpg"), timeout=5).headers["Content-Type"] == (
        "image/jpeg"
    )


def test_range_returns_exact_bytes(assets: AssetServer) -> None:
    response = requests.get(assets.url_for("clip.mp4"), headers={"Range": "bytes=10-19"}, timeout=5)
    assert response.status_code == 206
    assert response.content == CONTENT[10:20]
    assert response.headers["Content-Range"] == f"bytes 10-19/{len(CONTENT)}"
    assert response.headers["Content-Length"] == "10"


def test_suffix_and_open_ended_ranges(assets: AssetServer) -> None:
    url = assets.url_for("clip.mp4")
    suffix = requests.get(url, headers={"Range": "bytes=-16"}, timeout=5)
    assert suffix.status_code == 206
    assert suffix.content == CONTENT[-16:]
    assert suffix.headers["Content-Range"] == "bytes 1008-1023/1024"
    open_ended = requests.get(url, headers={"Range": "bytes=1000-"}, timeout=5)
    assert open_ended.content == CONTENT[1000:]


def test_unsatisfiable_range_is_416(assets: AssetServer) -> None:
    response = requests.get(
        assets.url_for("clip.mp4"), headers={"Range": "bytes=5000-6000"}, timeout=5
    )
    assert response.status_code == 416
    assert response.headers["Content-Range"] == "bytes */1024"
    assert response.content == b""


def test_head_sends_headers_only(assets: AssetServer) -> None:
    response = requests.head(assets.url_for("clip.mp4"), timeout=5)
    assert response.status_code == 200
    assert response.headers["Content-Length"] == str(len(CONTENT))
    assert response.content == b""
    # The connection stays usable after a HEAD (no stray body bytes on a kept-alive socket).
    with requests.Session() as session:
        session.head(assets.url_for("clip.mp4"), timeout=5)
        assert session.get(assets.url_for("clip.mp4"), timeout=5).content == CONTENT


@pytest.mark.parametrize(
    "raw_path",
    ["/../secret.txt", "/%2e%2e/secret.txt", "/sub/../../secret.txt", "/sub", "/", "/missing"],
)
def test_traversal_directories_and_missing_are_404(assets: AssetServer, raw_path: str) -> None:
    # A raw socket request: HTTP clients normalise "../" away before sending.
    with socket.create_connection(("127.0.0.1", assets.port), timeout=5) as connection:
        request = f"GET {raw_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        connection.sendall(request.encode())
        reply = b""
        while chunk := connection.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 404"), reply[:80]
    assert b"outside the root" not in reply


def test_served_log_records_path_range_status(assets: AssetServer) -> None:
    url = assets.url_for("clip.mp4")
    requests.get(url, timeout=5)
    requests.get(url, headers={"Range": "bytes=0-0"}, timeout=5)
    requests.get(assets.url_for("nope.png"), timeout=5)
    assert assets.served == [
        ServedRequest("/clip.mp4", None, 200),
        ServedRequest("/clip.mp4", "bytes=0-0", 206),
        ServedRequest("/nope.png", None, 404),
    ]


def test_given_port_is_used_and_released_on_exit(asset_root: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = AssetServer(asset_root, port=port)
    with server:
        assert server.port == port
        assert server.url_for("clip.mp4") == f"http://127.0.0.1:{port}/clip.mp4"
        assert requests.get(server.url_for("clip.mp4"), timeout=5).status_code == 200
    assert server.served[-1].status == 200  # evidence survives shutdown
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/clip.mp4", timeout=2)
    with socket.socket() as rebind:  # socket closed: the port can be bound again
        rebind.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-9", (0, 9)),
        ("bytes=90-", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-500", (0, 99)),
        ("bytes=50-500", (50, 99)),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=9-3", None),
    ],
)
def test_parse_byte_range(header: str, expected: tuple[int, int] | None) -> None:
    assert parse_byte_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=200-300", "bytes=-0"])
def test_parse_byte_range_unsatisfiable(header: str) -> None:
    with pytest.raises(UnsatisfiableRange):
        parse_byte_range(header, 100)
