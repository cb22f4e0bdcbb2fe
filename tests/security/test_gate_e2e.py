"""Attacks on the board gate through the real nginx and tbhub serve."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer
from tests.e2e.test_boards import JSON, wait_for_board

pytestmark = pytest.mark.e2e


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The gate reads no database on its hot path: one database kind is enough here."""
    return f"sqlite:///{tmp_path / 'tbhub.sqlite3'}"


@pytest.fixture
def server(make_server: Callable[..., TbhubServer]) -> Iterator[TbhubServer]:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_user("bob", "bob-password")
    write_project(server.add_project("foo", owner="alice"), runs=1, steps=5, tags=1)
    write_project(server.add_project("foobar", owner="bob"), runs=1, steps=5, tags=1)
    server.start()
    yield server


def test_a_member_of_foo_cannot_read_foobar_by_prefix(server: TbhubServer) -> None:
    """Attack: a project name that is a prefix of another's (`/boards/foo` vs `foobar`)."""
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "foo")
    for path in ("/boards/foobar/data/runs", "/boards/foobar", "/boards/foo" + "bar/"):
        response = alice.get(path, headers=JSON)
        assert response.status_code == 404, path  # as for a project that does not exist


def test_identity_headers_sent_by_a_client_change_nothing(server: TbhubServer) -> None:
    """Attack: claim to be another user with the headers proxies often trust."""
    alice = server.sign_in("alice", "alice-password")
    spoof = {**JSON, "X-Forwarded-User": "bob", "X-Remote-User": "bob", "X-Tbhub-User": "bob",
             "X-Tbhub-Role": "owner", "X-Board-User": "bob", "Remote-User": "bob"}  # fmt: skip
    assert alice.get("/boards/foobar/data/runs", headers=spoof).status_code == 404
    anonymous = httpx.get(f"{server.base_url}/boards/foobar/data/runs", headers=spoof)
    assert anonymous.status_code == 401


def test_a_dead_or_hung_control_plane_keeps_every_board_closed(server: TbhubServer) -> None:
    """Attack: wait for the auth hook to fail (crash, hang) and hope nginx lets you through."""
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "foo")
    bob = server.sign_in("bob", "bob-password")
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)  # the hook hangs
    try:
        started = time.monotonic()
        response = bob.get("/boards/foo/data/runs", headers=JSON, timeout=60)
        assert response.status_code >= 400 and response.status_code != 200
        assert time.monotonic() - started < 30  # bounded by the hook's timeouts, not 60 s
        anonymous = httpx.get(f"{server.base_url}/boards/foo/data/runs", timeout=60)
        assert anonymous.status_code >= 400
    finally:
        server.process.send_signal(signal.SIGCONT)
    server.kill()  # the hook is gone; nginx and the board stay up
    time.sleep(6)  # past nginx's 5 s cache of earlier "let in" answers
    for client in (alice, bob):
        assert client.get("/boards/foo/data/runs", headers=JSON).status_code >= 400


def test_bad_bytes_and_oversized_requests_get_4xx_never_5xx(server: TbhubServer) -> None:
    """Attack: invalid UTF-8, oversized bodies and headers, aimed at a 500 or a crash."""
    alice = server.sign_in("alice", "alice-password")
    policy = "/api/v1/projects/foo/retention"
    headers = {"Content-Type": "application/json"}
    for body in (b"\xff\xfe\xfd", b'{"keep_last": "\xff"}', b"{" * 10_000, b"[]", b"null"):
        response = alice.put(policy, content=body, headers=headers)
        assert 400 <= response.status_code < 500, (body[:20], response.status_code)
    assert alice.get("/api/v1/projects/%ff%fe").status_code in (404, 422)
    assert alice.get("/boards/%ff/", headers=JSON).status_code in (400, 403, 404)
    big = alice.put(policy, content=b"x" * (65 * 1024 * 1024), headers=headers)
    assert big.status_code == 413
    huge_header = alice.get("/api/v1/projects", headers={"X-Junk": "x" * 64_000})
    assert 400 <= huge_header.status_code < 500
    assert alice.get("/api/v1/projects").status_code == 200  # and the server is fine
