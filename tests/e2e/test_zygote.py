"""Boards forked from the zygote behind the real nginx: they outlive the zygote, are adopted
after a crash of `tbhub serve`, and leave nothing behind; `exec` still works as the fallback."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

import httpx
import numpy as np
import psutil

from tbhub.core.processes import ProcessRef, stop_group
from tbhub.storage.sample_logs import scalar_value, write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import JSON, wait_for_board
from tests.e2e.test_supervisor_restart import board_groups, gone


def zygote_ref(server: TbhubServer) -> ProcessRef | None:
    try:
        record = json.loads((server.data_dir / "zygote" / "zygote.json").read_text())
    except (OSError, ValueError):
        return None
    ref = ProcessRef(pid=record["pid"], create_time=record["create_time"])
    return ref if ref.is_alive() else None


def wait_for_zygote(server: TbhubServer, *, other_than: ProcessRef | None = None) -> ProcessRef:
    def found() -> ProcessRef | None:
        ref = zygote_ref(server)
        return ref if ref is not None and ref != other_than else None

    ref = wait_until(found, timeout=30, what="a running board zygote")
    assert isinstance(ref, ProcessRef)
    return ref


def launchers(server: TbhubServer) -> dict[str, str]:
    """project -> how its board process was started, from the board state files."""
    states = [json.loads(p.read_text()) for p in server.data_dir.glob("boards/*.json")]
    return {state["project"]: state["launcher"] for state in states}


def assert_exact_scalars(client: httpx.Client, project: str, run: int, steps: int) -> None:
    scalars = client.get(
        f"/boards/{project}/data/plugin/scalars/scalars",
        params={"run": f"run-{run:02d}", "tag": "metric/0"},
        headers=JSON,
    ).json()
    assert [step for _, step, _ in scalars] == list(range(steps))
    expected = [float(np.float32(scalar_value(run, 0, step))) for step in range(steps)]
    assert [value for _, _, value in scalars] == expected


def test_forked_boards_outlive_the_zygote_and_a_crash_of_serve(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=30, tags=1)
    write_project(server.add_project("audio", owner="alice"), runs=1, steps=30, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01"]
    assert_exact_scalars(alice, "vision", 1, 30)
    assert launchers(server) == {"vision": "zygote"}

    first_zygote = wait_for_zygote(server)
    stop_group(first_zygote, grace=5, signals=(signal.SIGKILL,))
    for _ in range(5):
        assert alice.get("/boards/vision/data/runs", headers=JSON).json() == ["run-00", "run-01"]
    second_zygote = wait_for_zygote(server, other_than=first_zygote)
    assert sorted(wait_for_board(alice, "audio").json()) == ["run-00"]
    assert launchers(server) == {"vision": "zygote", "audio": "zygote"}

    before = board_groups(server)
    server.kill()
    wait_until(lambda: gone(second_zygote.pid), timeout=10, what="the zygote to follow serve")
    server.start()
    alice = server.sign_in("alice", "alice-password")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01"]
    assert sorted(wait_for_board(alice, "audio").json()) == ["run-00"]
    assert board_groups(server) == before, "both boards are adopted, none started twice"
    assert_exact_scalars(alice, "audio", 0, 30)
    third_zygote = wait_for_zygote(server, other_than=second_zygote)

    server.stop()
    assert board_groups(server) == {}
    assert gone(third_zygote.pid)


def test_exec_launcher_still_serves_boards(make_server: Callable[..., TbhubServer]) -> None:
    server = make_server(board_launcher="exec")
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=30, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01"]
    assert_exact_scalars(alice, "vision", 0, 30)
    assert launchers(server) == {"vision": "exec"}
    assert server.process is not None
    (state,) = [json.loads(p.read_text()) for p in server.data_dir.glob("boards/*.json")]
    assert psutil.Process(state["pid"]).ppid() == server.process.pid, "tbhub serve's own child"
    assert not (server.data_dir / "zygote").exists()
