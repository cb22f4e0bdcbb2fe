"""Requests that nginx and the auth hook could read two ways are refused, and nginx's cache
of hook answers never lets one caller ride on another's answer.

Attack: plant a second `tbhub_session` cookie (sibling subdomain, plain http) so that a
member's request is let in and cached under a key the hook never checked; or send a path
that nginx normalises into another project than the one the hook judged.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable

import httpx
import pytest

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer
from tests.e2e.test_boards import JSON, wait_for_board

RUNS = ["run-00"]


@pytest.fixture
def server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_user("mallory", "mallory-password")
    server.add_user("bob", "bob-password")
    write_project(server.add_project("vision", owner="alice"), runs=1, steps=5, tags=1)
    write_project(server.add_project("audio", owner="bob"), runs=1, steps=5, tags=1)
    server.start()
    return server


def board_runs(server: TbhubServer, headers: list[tuple[str, str]]) -> httpx.Response:
    """A board request with exactly these headers and no cookie jar."""
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        return client.get("/boards/vision/data/runs", headers=[*JSON.items(), *headers])


def test_ambiguous_session_cookies_are_refused_and_never_poison_the_cache(
    server: TbhubServer,
) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")  # a serving board: "let in" answers are cacheable now
    member = alice.cookies["tbhub_session"]
    outsider = server.sign_in("mallory", "mallory-password").cookies["tbhub_session"]
    garbage = "not-a-session"

    # (the planted request, carrying the member's cookie too) -> (what the attacker sends after)
    forms = [
        ([("cookie", f"tbhub_session={outsider}; tbhub_session={member}")],
         [("cookie", f"tbhub_session={outsider}")]),
        ([("cookie", f"tbhub_session={member}; tbhub_session={outsider}")],
         [("cookie", f"tbhub_session={outsider}")]),
        ([("cookie", f"tbhub_session={garbage}; tbhub_session={member}")],
         [("cookie", f"tbhub_session={garbage}")]),
        ([("cookie", f"tbhub_session=; tbhub_session={member}")], []),
        ([("cookie", f"TBHUB_SESSION={outsider}; tbhub_session={member}")],
         [("cookie", f"TBHUB_SESSION={outsider}")]),
        ([("cookie", f"tbhub_session={member}; TBHUB_SESSION={outsider}")],
         [("cookie", f"TBHUB_SESSION={outsider}")]),
        ([("cookie", f"Tbhub_Session={member}")], [("cookie", f"Tbhub_Session={garbage}")]),
        ([("cookie", f"tbhub_session={outsider}"), ("cookie", f"tbhub_session={member}")],
         [("cookie", f"tbhub_session={outsider}")]),
        ([("cookie", f"tbhub_session={garbage}"), ("cookie", f"tbhub_session={member}")], []),
    ]  # fmt: skip
    for planted, follow_up in forms:
        first = board_runs(server, planted)
        assert first.status_code == 400, (planted, first.text)
        assert first.json()["error"]["code"] == "ambiguous_session"
        after = board_runs(server, follow_up)
        assert after.status_code in (400, 401, 404), (planted, follow_up, after.text)
        assert "error" in after.json()

    # The member's own, unambiguous cookie still reads the board.
    assert board_runs(server, [("cookie", f"tbhub_session={member}")]).json() == RUNS


def raw_get(server: TbhubServer, path: str, cookie: str) -> tuple[int, bytes]:
    """GET a path byte for byte: httpx would normalise dot segments before sending."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.putheader("Cookie", f"tbhub_session={cookie}")
        connection.putheader("Accept", "application/json")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_paths_nginx_would_normalise_into_another_project_are_refused(
    server: TbhubServer,
) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    wait_for_board(server.sign_in("bob", "bob-password"), "audio")
    cookie = alice.cookies["tbhub_session"]
    for path in [
        "/boards/vision/../audio/data/runs",
        "/boards/vision/%2e%2e/audio/data/runs",
        "/boards/vision/%2E%2E/audio/data/runs",
        "/boards/vision/.%2e/audio/data/runs",
        "/boards/vision%2F..%2Faudio/data/runs",
        "/boards/vision/..%2faudio/data/runs",
        "/boards/vision/..%5caudio/data/runs",
        "/boards/vision/..\\audio/data/runs",
        "/boards/vision/./data/runs",
        "/boards/vision//data/runs",
        "/boards/vision/data/runs/..",
    ]:
        status, body = raw_get(server, path, cookie)
        assert status == 400, (path, status, body)
        assert b'"unsafe_path"' in body, (path, body)
        # Whatever was just judged, alice's plain request for the other board is hers alone.
        status, body = raw_get(server, "/boards/audio/data/runs", cookie)
        assert status == 404 and b'"not_found"' in body, (path, status, body)

    # Encoded slashes in the query string are TensorBoard's own (tags like metric/0).
    response = alice.get(
        "/boards/vision/data/plugin/scalars/scalars", params={"run": "run-00", "tag": "metric/0"}
    )
    assert response.status_code == 200 and len(response.json()) == 5
