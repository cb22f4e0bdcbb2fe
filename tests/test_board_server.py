"""The board's HTTP server (board_process.board_server): keep-alive, and the count of the
requests it is answering that the supervisor asks of a board it drains."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tbhub.supervisor.board_process import IN_FLIGHT_PATH, board_server

PREFIX = "/boards/vision"
# TensorBoard's program module (the server's base class) imports its vendored bleach.
pytestmark = pytest.mark.filterwarnings("ignore:html5lib's sanitizer is deprecated")


class SlowApp:
    """Answers /slow only once released; anything else at once."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"].endswith("/slow"):
            self.release.wait(30)
        if environ["PATH_INFO"].endswith("/fail"):
            raise RuntimeError("the app failed")
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]


@pytest.fixture
def served() -> Iterator[tuple[str, SlowApp]]:
    app = SlowApp()
    flags = SimpleNamespace(host="127.0.0.1", port=0, path_prefix=PREFIX)
    server = board_server(app, flags)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.get_url().removesuffix(f"{PREFIX}/"), app
    finally:
        app.release.set()
        server.close()
        thread.join(10)


def in_flight(base: str) -> int:
    return int(httpx.get(f"{base}{IN_FLIGHT_PATH}", timeout=5).text)


def test_the_board_counts_the_requests_it_is_answering(served: tuple[str, SlowApp]) -> None:
    base, app = served
    assert in_flight(base) == 0
    slow = threading.Thread(target=lambda: httpx.get(f"{base}{PREFIX}/slow", timeout=30))
    slow.start()
    for _ in range(100):
        if in_flight(base) == 1:
            break
        time.sleep(0.05)
    assert in_flight(base) == 1
    app.release.set()
    slow.join(10)
    assert in_flight(base) == 0
    # A request the app fails is over too (the server answers 500).
    assert httpx.get(f"{base}{PREFIX}/fail", timeout=5).status_code == 500
    assert in_flight(base) == 0


def test_the_board_keeps_a_connection_open_for_the_next_request(
    served: tuple[str, SlowApp],
) -> None:
    base, _ = served
    ports = []
    with httpx.Client(timeout=5) as client:
        for _ in range(3):
            response = client.get(f"{base}{PREFIX}/data")
            assert response.status_code == 200 and response.text == "ok"
            assert response.headers.get("connection", "").lower() != "close"
            stream = response.extensions["network_stream"]
            ports.append(stream.get_extra_info("client_addr")[1])
    assert len(set(ports)) == 1, ports
