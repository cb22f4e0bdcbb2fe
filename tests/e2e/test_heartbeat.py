"""An open tab keeps its board alive through tbhub's heartbeat, not through board requests."""

from __future__ import annotations

import time
from collections.abc import Callable

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, board_processes, wait_until
from tests.e2e.test_boards import alice_on_her_board, wait_for_board


def test_board_page_carries_the_heartbeat_script(make_server: Callable[..., TbhubServer]) -> None:
    alice = alice_on_her_board(make_server, runs=1, steps=5)
    index = alice.get("/boards/vision/", headers={"Accept": "text/html"})
    assert index.status_code == 200 and "<tb-webapp>" in index.text
    tag = '<script src="/static/heartbeat.js" data-project="vision" defer></script></body>'
    assert index.text.count(tag) == 1
    # TensorBoard sends its 200 KB page uncompressed; nginx compresses it after adding tbhub's
    # scripts (httpx asks for gzip and inflates it).
    assert index.headers["content-encoding"] == "gzip"
    assert index.num_bytes_downloaded < len(index.content) / 4
    script = alice.get("/static/heartbeat.js")
    assert script.status_code == 200
    assert "/api/v1/boards/" in script.text and "visibilityState" in script.text


def test_heartbeats_keep_an_idle_board_running_until_they_stop(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(idle_timeout="3")
    server.add_user("alice", "alice-password")
    server.add_user("mallory", "mallory-password")
    write_project(server.add_project("vision", owner="alice"), runs=1, steps=5, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    pids = {p.pid for p in board_processes(server.board_state_dir)}
    assert pids

    mallory = server.sign_in("mallory", "mallory-password")
    assert mallory.post("/api/v1/boards/vision/heartbeat").status_code == 404
    assert server.client().post("/api/v1/boards/vision/heartbeat").status_code == 401

    deadline = time.monotonic() + 8  # well past the 3 s idle timeout
    while time.monotonic() < deadline:
        assert alice.post("/api/v1/boards/vision/heartbeat").status_code == 204
        time.sleep(0.5)
    assert {p.pid for p in board_processes(server.board_state_dir)} == pids

    wait_until(
        lambda: not board_processes(server.board_state_dir), timeout=30, what="the board to stop"
    )
