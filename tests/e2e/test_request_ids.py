"""TBHUB_LOG_FORMAT=json: one request's id (nginx's $request_id) is on nginx's access line
and on tbhub's JSON lines, for a control-plane request and for a board request, whose auth
hook subrequest carries the same id with the user and the project."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from typing import Any

from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import wait_for_board


def nginx_request_id(server: TbhubServer, marker: str) -> str:
    """The request id on nginx's access line for the request whose URI holds `marker`
    (nginx writes its log in buffers flushed every 5 s)."""
    log = server.data_dir / "nginx" / "logs" / "nginx-access.log"

    def found() -> str | None:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if marker in line and (match := re.search(r"request_id=([0-9a-f]{32})\b", line)):
                return match.group(1)
        return None

    return wait_until(found, timeout=15, what=f"nginx's line for {marker}")  # type: ignore[return-value]


def json_lines(server: TbhubServer, request_id: str) -> list[dict[str, Any]]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{") and request_id in line:
            lines.append(json.loads(line))
    return [line for line in lines if line.get("request_id") == request_id]


def started(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    return make_server(log_format="json").start_with_alice(runs=1)


def test_a_control_plane_requests_id_is_in_both_logs(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started(make_server)
    alice = server.sign_in("alice", "alice-password")
    marker = secrets.token_hex(6)
    assert alice.get("/api/v1/projects/vision", params={"m": marker}).status_code == 200
    request_id = nginx_request_id(server, marker)
    (access,) = [
        line for line in json_lines(server, request_id) if line["logger"] == "tbhub.access"
    ]
    assert access["route"] == "/api/v1/projects/{name}" and access["status"] == 200
    assert access["user"] == "alice" and access["project"] == "vision"


def test_a_board_requests_id_is_on_nginx_line_and_on_the_auth_hooks_line(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started(make_server)
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    # A new session and a new URI: nginx holds no hook answer for either (an answer for
    # the whole board is kept per cookie).
    alice = server.sign_in("alice", "alice-password")
    marker = secrets.token_hex(6)
    assert alice.get("/boards/vision/data/runs", params={"m": marker}).status_code == 200
    request_id = nginx_request_id(server, marker)
    (hook,) = [line for line in json_lines(server, request_id) if line["logger"] == "tbhub.access"]
    assert hook["route"] == "/_auth/board" and hook["status"] == 200
    assert hook["project"] == "vision" and hook["user_id"] is not None
    every = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    assert all("request_id" in line for line in every if line["logger"] == "tbhub.access")
