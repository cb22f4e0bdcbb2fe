"""A board never gets the caller's tbhub credentials: the gate has judged the session cookie
or API token, and a board (TensorBoard, its plugins, an operator's extra plugins) has no use
for them. The board here is tbhub's own launcher with real TensorBoard, wrapped to say in a
header which credentials reached it."""

from __future__ import annotations

from collections.abc import Callable

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer
from tests.e2e.test_boards import JSON, wait_for_board
from tests.scripts import write_script

CREDENTIAL_ECHO = """
import sys

from tbhub.supervisor.board_process import run_board

CREDENTIALS = ("HTTP_COOKIE", "HTTP_AUTHORIZATION")


def echo(wsgi_app):
    def app(environ, start_response):
        seen = ",".join(name for name in CREDENTIALS if environ.get(name)) or "none"

        def start(status, headers, exc_info=None):
            return start_response(status, [*headers, ("X-Test-Credentials", seen)], exc_info)

        return wsgi_app(environ, start)

    return app


if __name__ == "__main__":
    sys.exit(run_board(sys.argv[1:], middleware=echo))
"""


def test_a_board_gets_neither_the_session_cookie_nor_the_token(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=1, steps=5, tags=1)
    token = server.add_token("alice", ["vision"], scope="read")
    echo_board = write_script(server.data_dir.parent / "echo-board", CREDENTIAL_ECHO)
    server.env["TBHUB_TENSORBOARD_BIN"] = str(echo_board)
    server.start()

    alice = server.sign_in("alice", "alice-password")
    runs = wait_for_board(alice, "vision")
    assert runs.headers["x-test-credentials"] == "none"
    job = server.token_client(token)
    response = job.get("/boards/vision/data/runs", headers=JSON)
    assert response.status_code == 200, response.text
    assert response.headers["x-test-credentials"] == "none"
