"""A supervisor killed with SIGKILL leaves no orphan: the next one adopts or reaps its boards."""

from __future__ import annotations

import json
from collections.abc import Callable

import psutil

from tbhub.storage.sample_logs import write_project
from tbhub.supervisor.backends.local import INSTANCE_ENV
from tests.e2e.conftest import BOTH_DATABASES
from tests.e2e.harness import TbhubServer, board_processes, wait_until
from tests.e2e.test_boards import wait_for_board

# The gate and adoption read the database on every path: both kinds.
pytestmark = BOTH_DATABASES


def gone(pid: int) -> bool:
    """Exited. A zombie counts: its parent died and the reaper may not have collected it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def board_groups(server: TbhubServer) -> dict[str, set[int]]:
    """instance id -> PIDs of every live labelled board process."""
    groups: dict[str, set[int]] = {}
    for process in board_processes(server.board_state_dir):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                groups.setdefault(process.environ()[INSTANCE_ENV], set()).add(process.pid)
        except psutil.NoSuchProcess:  # exited (or became a zombie) since it was listed
            continue
    return groups


def started_server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    server.start()
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")
    return server


def test_restarted_supervisor_adopts_the_running_board(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started_server(make_server)
    before = board_groups(server)
    assert len(before) == 1
    nginx_master = json.loads((server.data_dir / "nginx" / "master.json").read_text())["pid"]

    server.kill()
    server.start()
    alice = server.sign_in("alice", "alice-password")
    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01"]
    assert board_groups(server) == before, "the live board is adopted, not started twice"
    assert gone(nginx_master), "the old nginx master is stopped"


def test_board_without_a_state_file_is_reaped_on_restart(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started_server(make_server)
    ((orphan_id, orphan_pids),) = board_groups(server).items()

    server.kill()
    # As if the supervisor had died between starting the process and recording it.
    (server.data_dir / "boards" / f"{orphan_id}.json").unlink()
    server.start()
    wait_until(
        lambda: all(gone(pid) for pid in orphan_pids),
        timeout=30,
        what="the unrecorded board to be reaped",
    )
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    groups = board_groups(server)
    assert len(groups) == 1 and orphan_id not in groups


def test_stopping_the_server_stops_its_boards_and_nginx(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started_server(make_server)
    nginx_master = json.loads((server.data_dir / "nginx" / "master.json").read_text())["pid"]
    server.stop()
    assert board_groups(server) == {}
    assert gone(nginx_master)
