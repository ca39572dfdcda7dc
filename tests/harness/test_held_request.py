"""A held request against a real local HTTP server that streams server-sent events: it returns
once the first chunk arrived, says whether the stream ended by itself, and closing it cuts the
stream (the server sees the client go)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from harness.topology.held_request import HeldRequest

CHUNK_S = 0.02  # the server's pause between chunks
HANG_S = 60  # a deadline for a hang, not a speed: each wait ends within a chunk or two


class StreamingServer(http.server.ThreadingHTTPServer):
    """Streams `lines` chunks for a POST (a 400 for `{"bad": ...}` bodies); records whether a
    client went away before the last one."""

    daemon_threads = True
    lines = 0
    client_left = threading.Event()


class StreamHandler(http.server.BaseHTTPRequestHandler):
    server: StreamingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if b'"bad"' in body:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")  # as Dynamo's frontend streams
        self.end_headers()
        try:
            for n in range(self.server.lines):
                event = f"data: {n}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                time.sleep(CHUNK_S)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.server.client_left.set()


@pytest.fixture
def server() -> Iterator[StreamingServer]:
    srv = StreamingServer(("127.0.0.1", 0), StreamHandler)
    srv.client_left = threading.Event()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def url(srv: StreamingServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/v1/chat/completions"


def test_a_hold_closed_before_its_stream_ends_was_not_finished_and_cuts_the_stream(
    server: StreamingServer,
) -> None:
    server.lines = 500  # 10 s of chunks
    with requests.Session() as http, HeldRequest(http, url(server), {"n": 1}, HANG_S) as held:
        assert held.status == 200
        assert not held.finished
    assert not held.finished
    assert server.client_left.wait(HANG_S)


def test_a_hold_whose_stream_ended_by_itself_is_finished(server: StreamingServer) -> None:
    server.lines = 3
    with requests.Session() as http, HeldRequest(http, url(server), {"n": 1}, HANG_S) as held:
        deadline = time.monotonic() + HANG_S
        while not held.finished and time.monotonic() < deadline:
            time.sleep(CHUNK_S)
        assert held.finished
    assert not server.client_left.is_set()


def test_a_hold_answered_with_an_error_status_is_finished_at_once(server: StreamingServer) -> None:
    with requests.Session() as http, HeldRequest(http, url(server), {"bad": 1}, HANG_S) as held:
        assert held.status == 400
        assert held.finished
