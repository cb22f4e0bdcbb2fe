"""A board that grows past its memory limit is replaced blue/green without one failed request."""

from __future__ import annotations

from collections.abc import Callable

import psutil

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, board_processes
from tests.e2e.healing import (
    JSON,
    board_row,
    leak_past_the_limit_under_load,
    leaky_tensorboard,
)
from tests.e2e.test_boards import wait_for_board

MiB = 1024 * 1024


def leaking_server(make_server: Callable[..., TbhubServer], **settings: str) -> TbhubServer:
    server = make_server(**settings)
    server.env["TBHUB_TENSORBOARD_BIN"] = str(leaky_tensorboard(server))
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=3, steps=20, tags=1)
    server.start()
    return server


def test_leaking_board_is_replaced_under_load_through_nginx_with_no_failed_request(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = leaking_server(
        make_server, board_memory_limit="400MiB", board_memory_fresh_seconds="0"
    )
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    before = board_row(server)
    assert before.instance_id is not None and before.upstream is not None
    old_pids = {p.pid for p in board_processes(server.board_state_dir)}

    _old, new = leak_past_the_limit_under_load(
        server,
        alice,
        old_gone=lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                                 for p in old_pids),
    )  # fmt: skip
    assert new.pss_bytes is not None and new.pss_bytes < 400 * MiB
    served_by = alice.get("/boards/vision/data/runs", headers=JSON).headers["x-test-instance"]
    assert served_by == new.instance_id, "nginx sends requests to the new board"
    runs = alice.get("/boards/vision/data/runs", headers=JSON).json()
    assert sorted(runs) == ["run-00", "run-01", "run-02"]
    log = server.log()
    assert "restarting board vision (reason: memory)" in log
    assert log.count("board vision ready in") == 2
    assert "replaced (memory)" in log
    assert "HTTP Request" not in log, "no line per health probe"
