"""nginx keeps its connections to a board open and reuses them (Lua's balancer and a pool,
nginx/tbhub.conf.j2; the board serves HTTP/1.1 keep-alive, board_process.board_server), and
a board under load through nginx answers every request, as a process and as a container,
also while it is replaced by a new one (the pool's connections to the old board drain, the
new board's are opened: no request is reset or refused)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from tests.e2e.containers import started_board
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import JSON, Load, board_row, restart_reasons
from tests.e2e.test_boards import wait_for_board

CONNECTIONS, REQUESTS_EACH = 64, 25
PATHS = ("/boards/vision/data/environment", "/boards/vision/data/runs")


@pytest.fixture
def server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    from tbhub.storage.sample_logs import write_project

    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=3, steps=40, tags=2)
    server.start()
    return server


def board_pid(server: TbhubServer) -> int:
    (state,) = [json.loads(p.read_text()) for p in server.data_dir.glob("boards/*.json")]
    return int(state["pid"])


def open_connections(pid: int, port: int) -> set[int]:
    """The client ports of the connections the board holds open on its serving port."""
    return {
        c.raddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port and c.raddr
    }


def test_nginx_reuses_one_open_connection_to_the_board(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    port = int(str(board_row(server).upstream).rsplit(":", 1)[1])
    pid = board_pid(server)
    seen = []
    for i in range(20):
        response = alice.get(PATHS[i % 2], headers=JSON)
        assert response.status_code == 200, response.text
        seen.append(open_connections(pid, port))
    # One request at a time: one connection, kept open after each answer and used again.
    # (With a connection per request the board holds none once it has answered.)
    assert len(seen[0]) == 1, seen
    assert all(held == seen[0] for held in seen), seen


def hammer(server: TbhubServer, cookies: httpx.Cookies) -> list[str]:
    """CONNECTIONS clients at once, REQUESTS_EACH requests each, through nginx: what every
    answer was (a status, or the error that ended the request)."""

    def one_client(index: int) -> list[str]:
        outcomes = []
        with httpx.Client(base_url=server.base_url, cookies=cookies, timeout=30) as client:
            for i in range(REQUESTS_EACH):
                try:
                    response = client.get(PATHS[(index + i) % 2], headers=JSON)
                    outcomes.append(str(response.status_code))
                except httpx.HTTPError as exc:
                    outcomes.append(type(exc).__name__)
        return outcomes

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        return [o for outcomes in pool.map(one_client, range(CONNECTIONS)) for o in outcomes]


def test_a_board_under_load_answers_every_request(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    outcomes = hammer(server, alice.cookies)
    assert len(outcomes) == CONNECTIONS * REQUESTS_EACH
    assert set(outcomes) == {"200"}, {o: outcomes.count(o) for o in set(outcomes)}


@pytest.mark.parametrize("upstream", ["published", "bridge"])
def test_a_container_board_under_load_answers_every_request(
    make_server: Callable[..., TbhubServer], docker_client: object, installation: str,
    upstream: str,
) -> None:  # fmt: skip
    server, alice = started_board(make_server, installation, "docker", docker_upstream=upstream)
    outcomes = hammer(server, alice.cookies)
    assert len(outcomes) == CONNECTIONS * REQUESTS_EACH
    assert set(outcomes) == {"200"}, {o: outcomes.count(o) for o in set(outcomes)}


def restart_under_load(server: TbhubServer, alice: httpx.Client) -> None:
    """64 clients read the board through nginx while it is restarted (a new instance, the
    switch, the old one drained and stopped): every request answers 200."""
    old = board_row(server)
    with Load(alice, PATHS[0], connections=CONNECTIONS) as load:
        time.sleep(1)
        server.cli("admin", "board", "restart", "vision")
        wait_until(
            lambda: board_row(server).instance_id not in (None, old.instance_id),
            timeout=90,
            what="the upstream to switch to the new board",
        )
        wait_until(
            lambda: board_row(server).draining_instance_id is None,
            timeout=90,
            what="the old board to drain and stop",
        )
        time.sleep(1)  # requests on the pool's connections to the new board only
    assert load.failures == [], f"{len(load.failures)} failed of {load.ok + len(load.failures)}"
    assert load.ok > 200, "the load ran through the swap"
    new = board_row(server)
    assert new.observed_state == "ready" and new.upstream != old.upstream
    assert restart_reasons(server) == ["admin"]


def test_a_board_restarted_under_load_answers_every_request(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    restart_under_load(server, alice)


def test_a_container_board_restarted_under_load_answers_every_request(
    make_server: Callable[..., TbhubServer], docker_client: object, installation: str
) -> None:
    server, alice = started_board(make_server, installation, "docker")
    restart_under_load(server, alice)
