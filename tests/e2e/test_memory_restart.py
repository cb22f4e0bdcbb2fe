"""A board that grows past its memory limit is replaced blue/green without one failed request."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from tbhub.sample_logs import write_project
from tests.e2e.harness import TbhubServer, board_processes, wait_until
from tests.e2e.healing import JSON, Load, board_row, leaky_tensorboard, restart_reasons
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
    old = board_row(server)
    assert old.instance_id is not None and old.upstream is not None
    old_pids = {p.pid for p in board_processes(server.board_state_dir)}

    with Load(alice, "/boards/vision/data/runs") as load:
        time.sleep(1)
        leak = alice.get("/boards/vision/data/environment?tbhub_test_leak_mib=450", headers=JSON)
        assert leak.status_code == 200
        wait_until(
            lambda: board_row(server).instance_id not in (None, old.instance_id),
            timeout=90,
            what="the upstream to switch to the replacement",
        )
        wait_until(
            lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
                            for p in old_pids),
            timeout=60,
            what="the old board to stop after draining",
        )  # fmt: skip
        time.sleep(1)

    assert load.failures == [], f"{len(load.failures)} failed of {load.ok + len(load.failures)}"
    assert load.ok > 100, "the load really ran through the swap"
    new = board_row(server)
    assert new.observed_state == "ready" and new.upstream != old.upstream
    assert new.restarts == {"memory": 1}
    assert restart_reasons(server) == ["memory"]
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
