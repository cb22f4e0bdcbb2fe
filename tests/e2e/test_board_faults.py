"""Boards that crash, hang or need more memory than their limit, with real TensorBoard, nginx
and processes; and a `tbhub serve` killed in the middle of a swap."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator

import httpx
import psutil
import pytest

from tbhub.core.processes import ProcessRef
from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import JSON, board_row, restart_reasons
from tests.e2e.test_boards import wait_for_board
from tests.e2e.test_supervisor_restart import board_groups, gone

RUNS = "/boards/vision/data/runs"


def started(make_server: Callable[..., TbhubServer], **settings: str) -> TbhubServer:
    server = make_server(**settings)
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    server.start()
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")
    return server


@pytest.fixture
def stopped_processes() -> Iterator[list[ProcessRef]]:
    """Processes a test SIGSTOPs; continued afterwards (if still the same processes), so
    that cleanup can stop them."""
    refs: list[ProcessRef] = []
    yield refs
    for ref in refs:
        process = ref.leader()
        if process is not None:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)


def only_group(server: TbhubServer) -> tuple[str, set[int]]:
    ((instance, pids),) = board_groups(server).items()
    return instance, pids


def test_board_killed_with_sigkill_is_restarted_as_a_crash(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started(make_server)
    instance, pids = only_group(server)
    os.killpg(min(pids), signal.SIGKILL)  # the group leader's PID is the group id
    wait_until(lambda: board_row(server).restarts, timeout=60, what="the crash restart")
    alice = server.sign_in("alice", "alice-password")
    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01"]
    new_instance, _ = only_group(server)
    assert new_instance != instance
    assert board_row(server).restarts == {"crash": 1}
    assert restart_reasons(server) == ["crash"]
    assert "exited; last lines" in server.log()


def test_the_request_after_a_board_came_back_elsewhere_reaches_it_there(
    make_server: Callable[..., TbhubServer],
) -> None:
    # nginx keeps the hook's "let in" answer, the board's address with it, up to 5 s. A
    # board that crashed and came back on another port within that time must be reached
    # there by the next request, not sent the starting page until the answer runs out.
    server = started(make_server)
    alice = server.sign_in("alice", "alice-password")
    hook = httpx.Client(base_url=f"http://127.0.0.1:{server.api_port}", cookies=alice.cookies)
    server.clients.append(hook)

    def upstream() -> str | None:
        answer = hook.get("/_auth/board", headers={"X-Tbhub-Original-Uri": RUNS})
        serving = answer.status_code == 200 and answer.headers["x-accel-expires"] != "0"
        return answer.headers["x-board-upstream"] if serving else None

    before = upstream()
    assert alice.get(RUNS, headers=JSON).status_code == 200  # the answer is kept now
    _, pids = only_group(server)
    os.killpg(min(pids), signal.SIGKILL)
    # A URL not asked before, so that nginx has no answer of the board's to give for it
    # (it keeps those a second: tests/e2e/test_board_answer_cache.py) and asks the board.
    first_asked = alice.get(RUNS, params={"after": "kill"}, headers=JSON)
    assert first_asked.status_code == 503  # its old address failed
    wait_until(lambda: upstream() not in (None, before), timeout=60, what="the board back")
    assert alice.get(RUNS, headers=JSON).status_code == 200


def test_board_stopped_with_sigstop_is_replaced_then_its_group_killed(
    make_server: Callable[..., TbhubServer], stopped_processes: list[ProcessRef]
) -> None:
    server = started(make_server, board_probe_timeout="1", board_hung_probes="3")
    instance, pids = only_group(server)
    stopped_processes.extend(ProcessRef.of(pid) for pid in pids)
    os.killpg(os.getpgid(min(pids)), signal.SIGSTOP)

    wait_until(lambda: all(gone(p) for p in pids), timeout=90, what="the hung group to be killed")
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    new_instance, _ = only_group(server)
    assert new_instance != instance
    row = board_row(server)
    assert row.restarts == {"hung": 1} and row.observed_state == "ready"
    assert restart_reasons(server) == ["hung"]
    assert "replaced (hung)" in server.log()


def test_limit_below_the_working_set_backs_off_without_a_restart_storm(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started(make_server, board_memory_limit="20MiB")
    instance, _ = only_group(server)

    def status() -> dict[str, object]:
        out = server.cli("admin", "board", "status", "vision", "--json").stdout
        return json.loads(out)  # type: ignore[no-any-return]

    wait_until(lambda: status()["status_note"], timeout=30, what="the backoff note")
    note = str(status()["status_note"])
    assert note.startswith("memory limit below what this board needs")
    assert "Raise the project's memory limit" in note
    time.sleep(5)  # five more passes: a storm would have restarted the board by now
    assert only_group(server)[0] == instance
    assert status()["restarts"] == {} and restart_reasons(server) == []
    alice = server.sign_in("alice", "alice-password")
    assert alice.get("/boards/vision/data/runs", headers=JSON).status_code == 200
    [listed] = json.loads(server.cli("admin", "board", "list", "--json").stdout)
    assert listed["status_note"] == note and listed["memory_limit"] == 20 * 1024 * 1024


def test_serve_killed_in_the_middle_of_a_swap_leaves_one_board_and_no_orphan(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = started(make_server)
    first, first_pids = only_group(server)
    server.cli("admin", "board", "restart", "vision")
    wait_until(lambda: len(board_groups(server)) == 2, timeout=30, what="the replacement")
    server.kill()  # the supervisor dies with two boards of one project alive
    nginx = json.loads((server.data_dir / "nginx" / "master.json").read_text())["pid"]

    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    wait_until(lambda: len(board_groups(server)) == 1, timeout=60, what="exactly one board")
    wait_until(lambda: all(gone(p) for p in first_pids), timeout=30, what="the old board to go")
    (survivor, pids) = only_group(server)
    assert survivor != first
    assert board_row(server).instance_id == survivor
    assert gone(nginx), "the old nginx master is stopped"

    def state_files() -> list[str]:
        return sorted(p.stem for p in (server.data_dir / "boards").glob("*.json"))

    # stop() removes a state file just after its process group has ended: allow that instant.
    wait_until(lambda: state_files() == [survivor], timeout=5,
               what="no state file left for a process that is gone")  # fmt: skip
    assert all(psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
