"""A member opens their project's board through nginx; everyone else is kept out."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

import httpx
import numpy as np
import pytest

from tbhub.http.security_headers import BOARD_CSP
from tbhub.storage.sample_logs import scalar_value, write_project
from tests.e2e.conftest import BOTH_DATABASES
from tests.e2e.harness import TbhubServer, board_processes, wait_until
from tests.forms import form_token

# The gate and adoption read the database on every path: both kinds.
pytestmark = BOTH_DATABASES

HTML = {"Accept": "text/html,application/xhtml+xml"}
JSON = {"Accept": "application/json"}


@pytest.fixture
def server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_user("mallory", "mallory-password")
    write_project(server.add_project("vision", owner="alice"), runs=3, steps=40, tags=2)
    server.start()
    return server


def wait_for_board(client: httpx.Client, project: str) -> httpx.Response:
    def ready() -> httpx.Response | None:
        response = client.get(f"/boards/{project}/data/runs", headers=JSON)
        return response if response.status_code == 200 and response.json() else None

    return wait_until(ready, timeout=60, what=f"board {project} to list runs")  # type: ignore[return-value]


def alice_on_her_board(
    make_server: Callable[..., TbhubServer], *, runs: int, steps: int
) -> httpx.Client:
    """A server with alice's project vision (`runs` x `steps`, one tag), its board up, and
    alice signed in."""
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=runs, steps=steps, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    return alice


def assert_exact_scalars(client: httpx.Client, project: str, *, steps: int) -> None:
    """run-01's metric/1 through the board: every step, each value as the writer wrote it."""
    scalars = client.get(
        f"/boards/{project}/data/plugin/scalars/scalars",
        params={"run": "run-01", "tag": "metric/1"},
    ).json()
    assert [step for _, step, _ in scalars] == list(range(steps))
    expected = [float(np.float32(scalar_value(1, 1, step))) for step in range(steps)]
    assert [value for _, _, value in scalars] == expected


def test_member_gets_starting_page_then_the_runs_and_exact_scalars(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    first = alice.get("/boards/vision/", headers=HTML)
    assert first.status_code == 200
    assert 'data-tbhub="board-starting"' in first.text
    assert 'http-equiv="refresh"' in first.text

    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01", "run-02"]
    assert_exact_scalars(alice, "vision", steps=40)

    index = alice.get("/boards/vision/", headers=HTML)
    assert index.status_code == 200 and "<tb-webapp>" in index.text


def test_xhr_to_a_starting_board_gets_503_with_retry_after(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    response = alice.get("/boards/vision/data/runs", headers=JSON)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["code"] == "board_starting"


def test_non_member_gets_404_as_for_a_project_that_does_not_exist(server: TbhubServer) -> None:
    mallory = server.sign_in("mallory", "mallory-password")
    page = mallory.get("/boards/vision/", headers=HTML)
    assert page.status_code == 404
    assert "no project named" in page.text
    api = mallory.get("/boards/vision/data/runs", headers=JSON)
    assert api.status_code == 404
    assert api.json()["error"]["code"] == "not_found"
    assert mallory.get("/api/v1/projects").json() == []


def test_anonymous_browser_is_redirected_to_sign_in(server: TbhubServer) -> None:
    response = httpx.get(f"{server.base_url}/boards/vision/data/runs?x=1", headers=HTML)
    assert response.status_code == 302
    assert (
        response.headers["location"] == "/auth/login?next=%2Fboards%2Fvision%2Fdata%2Fruns%3Fx%3D1"
    )


def test_anonymous_api_calls_get_401_json(server: TbhubServer) -> None:
    board = httpx.get(f"{server.base_url}/boards/vision/data/runs", headers=JSON)
    assert board.status_code == 401
    assert board.json()["error"]["code"] == "not_authenticated"
    api = httpx.get(f"{server.base_url}/api/v1/projects")
    assert api.status_code == 401
    assert api.json()["error"]["code"] == "not_authenticated"


def test_forged_session_cookie_counts_as_anonymous(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    payload, _mac = alice.cookies["tbhub_session"].split(".")
    forged = httpx.get(
        f"{server.base_url}/boards/vision/data/runs",
        headers=JSON,
        cookies={"tbhub_session": f"{payload}.AAAA"},
    )
    assert forged.status_code == 401


class _Decoy(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Decoy.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"decoy")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def decoy() -> Iterator[str]:
    _Decoy.hits = []
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Decoy)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_spoofed_board_headers_from_the_client_change_nothing(
    server: TbhubServer, decoy: str
) -> None:
    spoof = {"X-Board-Upstream": decoy, "X-Tbhub-Original-Uri": "/boards/vision/", **JSON}
    anonymous = httpx.get(f"{server.base_url}/boards/vision/data/runs", headers=spoof)
    assert anonymous.status_code == 401
    mallory = server.sign_in("mallory", "mallory-password")
    assert mallory.get("/boards/vision/data/runs", headers=spoof).status_code == 404

    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    response = alice.get("/boards/vision/data/runs", headers=spoof)
    assert response.status_code == 200
    assert sorted(response.json()) == ["run-00", "run-01", "run-02"]
    assert _Decoy.hits == []


def test_unknown_project_shows_a_404_page(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    page = alice.get("/boards/no-such-project/", headers=HTML)
    assert page.status_code == 404
    assert "no project named" in page.text
    bad_slug = alice.get("/boards/Not_A_Slug/", headers=HTML)
    assert bad_slug.status_code == 404


def test_wrong_password_gets_one_generic_message(server: TbhubServer) -> None:
    messages = []
    for name in ("alice", "nobody-here"):
        client = server.client()
        response = client.post(
            "/auth/login",
            data={"username": name, "password": "wrong-password", "csrf_token": form_token(client)},
        )
        assert response.status_code == 401
        assert "tbhub_session" not in response.cookies
        messages.append(response.text.split('role="alert">')[1].split("<")[0])
    assert messages[0] == messages[1] == "wrong user name or password; check both and try again"


def test_idle_board_is_stopped_and_its_processes_are_gone(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(idle_timeout="3")
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=1, steps=10, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    processes = board_processes(server.board_state_dir)
    assert processes, "the board should run as labelled processes"

    wait_until(
        lambda: not board_processes(server.board_state_dir),
        timeout=30,
        what="the idle board to stop",
    )
    assert not any(p.is_running() and p.status() != "zombie" for p in processes)
    state = server.cli("admin", "project", "list", "--json").stdout
    assert '"board": "stopped"' in state


def test_board_answers_carry_tbhubs_csp_on_top_of_tensorboards(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    for path in ("/boards/vision/", "/boards/vision/data/runs"):
        response = alice.get(path, headers=HTML)
        policies = response.headers.get_list("content-security-policy")
        assert BOARD_CSP in policies, (path, policies)
        assert response.headers["x-content-type-options"] == "nosniff"
