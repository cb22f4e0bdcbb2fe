"""nginx keeps a board's answers for a second (TBHUB_BOARD_ANSWER_CACHE_SECONDS, 1 by default;
nginx/tbhub.conf.j2, board_proxy) once the board has finished its first load of its logdir
(supervisor/data_server/first_load.py): the readers of one board who ask the same URL cost it
one answer, a board still loading gives each reader a fresh answer, the gate still judges every
request before the kept answer is read, the control plane's answers under a board's URL (a
listing made for one caller) are never kept, and no header of the board's sets how long an
answer is kept or sends a request elsewhere."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tbhub.core.models import Role
from tbhub.domain.projects import set_membership
from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import wait_for_board
from tests.scripts import write_script

JSON = {"Accept": "application/json"}
CACHE = "X-Tbhub-Board-Cache"
# nginx counts an answer's lifetime in whole seconds: one kept for 1 s is gone within 2 s.
KEPT_AT_MOST = 2.2

# tbhub's launcher (real TensorBoard) behind a WSGI wrapper that, when asked with
# `tbhub_test_accel`, adds the headers nginx obeys from an upstream unless told not to.
ACCEL_BOARD = """\
import sys
from urllib.parse import parse_qs

from tbhub.supervisor.board_process import run_board


def accel(wsgi_app):
    def app(environ, start_response):
        asked = "tbhub_test_accel" in parse_qs(environ.get("QUERY_STRING", ""))

        def start(status, headers, exc_info=None):
            extra = [("X-Accel-Expires", "3600"), ("X-Accel-Redirect", "/api/v1/health")]
            return start_response(status, [*headers, *(extra if asked else [])], exc_info)

        return wsgi_app(environ, start)

    return app


if __name__ == "__main__":
    sys.exit(run_board(sys.argv[1:], middleware=accel))
"""


def serving(server: TbhubServer) -> TbhubServer:
    server.add_user("alice", "alice-password")
    server.add_user("carol", "carol-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=2)
    with server.db() as session:
        set_membership(session, project="vision", user="carol", role=Role.viewer, actor="test")
    server.start()
    return server


@pytest.fixture
def server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    return serving(make_server())  # the default: answers kept a second


def board_pid(server: TbhubServer) -> int:
    (state,) = [json.loads(p.read_text()) for p in server.data_dir.glob("boards/*.json")]
    return int(state["pid"])


def histograms_kept_from_viewers(server: TbhubServer) -> tuple[httpx.Client, httpx.Client]:
    """The owner and a viewer, signed in, with the board serving and its histograms
    restricted for viewers."""
    alice = server.sign_in("alice", "alice-password")
    carol = server.sign_in("carol", "carol-password")
    wait_for_board(alice, "vision")
    answer = alice.put(
        "/api/v1/projects/vision/board/settings",
        json={"restricted_dashboards": ["histograms"], "restricted_audience": "viewers"},
    )
    assert answer.status_code == 200, answer.text
    return alice, carol


def kept(client: httpx.Client, url: str) -> list[httpx.Response]:
    """Ask until nginx answers from its cache (it keeps an answer from its second asking)."""
    answers = [client.get(url, headers=JSON) for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert answers[-1].headers[CACHE] == "HIT", [a.headers.get(CACHE) for a in answers]
    return answers


def test_readers_of_one_url_get_the_boards_answer_from_nginx_for_a_second(
    server: TbhubServer,
) -> None:
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    url = "/boards/vision/data/runs?asked=first-here"  # a URL wait_for_board did not ask
    first, second, hit = kept(alice, url)
    assert first.headers[CACHE] == second.headers[CACHE] == "MISS"
    assert hit.json() == first.json() and sorted(hit.json()) == ["run-00", "run-01"]
    # The same headers as the board's own answer: tbhub's CSP and the usual ones.
    for name in ("Content-Security-Policy", "X-Content-Type-Options", "Content-Type"):
        assert hit.headers[name] == first.headers[name], name
    # A kept answer does not ask the board: it answers while the board cannot.
    pid = board_pid(server)
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen = alice.get(url, headers=JSON, timeout=1.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert (frozen.status_code, frozen.headers[CACHE]) == (200, "HIT")
    assert frozen.json() == first.json()
    # ... for a second only: then the board is asked again.
    time.sleep(KEPT_AT_MOST)
    again = alice.get(url, headers=JSON)
    assert again.status_code == 200 and again.headers[CACHE] != "HIT", again.headers


def test_the_gate_judges_a_request_before_a_kept_answer_is_read(server: TbhubServer) -> None:
    alice, carol = histograms_kept_from_viewers(server)
    url = "/boards/vision/data/plugin/histograms/tags"
    kept(alice, url)  # the owner's answer, kept
    refused = carol.get(url, headers=JSON)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert CACHE not in refused.headers


def test_a_listing_made_for_one_caller_is_never_kept(server: TbhubServer) -> None:
    alice, carol = histograms_kept_from_viewers(server)
    url = "/boards/vision/data/plugins_listing"
    # The viewer's listing comes from the control plane, made for her: never kept.
    for_carol = [carol.get(url, headers=JSON) for _ in range(3)]
    assert all(a.status_code == 200 for a in for_carol)
    assert {a.headers.get(CACHE) for a in for_carol} <= {"BYPASS", None}
    assert "histograms" not in for_carol[-1].json()
    # The owner's comes from the board, and is kept; the viewer still gets her own.
    owners = kept(alice, url)[-1].json()
    assert "histograms" in owners
    assert "histograms" not in carol.get(url, headers=JSON).json()


@pytest.mark.parametrize("keep_seconds", ["1", "0"])
def test_no_header_of_the_boards_redirects_a_request_or_lengthens_its_keeping(
    make_server: Callable[..., TbhubServer], keep_seconds: str
) -> None:
    server = make_server(board_answer_cache_seconds=keep_seconds)
    server.env["TBHUB_TENSORBOARD_BIN"] = str(
        write_script(server.data_dir.parent / "accel-tensorboard", ACCEL_BOARD)
    )
    serving(server)
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    url = "/boards/vision/data/environment?tbhub_test_accel=1"
    answers = [alice.get(url, headers=JSON) for _ in range(3)]
    # The board's own answer each time, not the control plane's page at the URL it named
    # (which the caller's cookie would have reached).
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    assert all("window_title" in a.json() for a in answers), [a.text for a in answers]
    assert all("X-Accel-Redirect" not in a.headers for a in answers)
    if keep_seconds == "0":
        return
    assert answers[-1].headers[CACHE] == "HIT"
    time.sleep(KEPT_AT_MOST)
    again = alice.get(url, headers=JSON)
    assert again.headers[CACHE] != "HIT", "kept as long as the board's X-Accel-Expires said"


@contextmanager
def opening_held(path: Path) -> Iterator[None]:
    """Every other process's open() of `path` waits while this block runs (a write lease,
    fcntl(2): the kernel holds an opener until the lease is let go, or for at most
    /proc/sys/fs/lease-break-time, 45 s by default)."""
    previous = signal.signal(signal.SIGIO, lambda *_: None)  # the kernel's "someone waits"
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        yield
    finally:
        os.close(fd)  # lets go of the lease
        signal.signal(signal.SIGIO, previous)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_board_still_loading_its_logdir_gives_every_reader_a_fresh_answer(
    make_server: Callable[..., TbhubServer], request: pytest.FixtureRequest, backend: str
) -> None:
    """A subprocess board, and a container board (the launcher in the board image)."""
    settings = {}  # the default: answers kept a second
    if backend == "docker":
        settings = {"board_backend": "docker",
                    "installation_id": request.getfixturevalue("installation")}  # fmt: skip
    server = make_server(**settings)
    server.add_user("alice", "alice-password")
    project = server.add_project("vision", owner="alice")
    write_project(project, runs=3, steps=20, tags=2)
    # The board's data server cannot open one run's event file: its first pass over the
    # logdir goes on, as it does over thousands of runs, until the file is let go.
    (held,) = project.glob("run-02/events.out.tfevents.*")
    url = "/boards/vision/data/runs?asked=while-loading"
    with opening_held(held):
        server.start()
        alice = server.sign_in("alice", "alice-password")
        wait_until(lambda: alice.get("/boards/vision/data/runs", headers=JSON).status_code == 200,
                   timeout=60, what="the board to answer")  # fmt: skip
        loading = [alice.get(url, headers=JSON) for _ in range(4)]
        assert [a.status_code for a in loading] == [200] * 4, [a.text for a in loading]
        assert [a.headers.get(CACHE) for a in loading] == ["MISS"] * 4
    # The first load finishes: from then on the board's answers are kept.
    wait_until(lambda: alice.get(url, headers=JSON).headers.get(CACHE) == "HIT", timeout=20,
               what="the board's answers kept after its first load")  # fmt: skip
    listing = alice.get(url, headers=JSON)
    assert sorted(listing.json()) == ["run-00", "run-01", "run-02"]


def test_the_board_s_log_keeps_the_data_server_s_words_without_its_load_cycles(
    server: TbhubServer,
) -> None:
    """Each board's log is what it was: the data server's warnings, not its info lines that
    first_load asks for (two per reload interval for as long as the board runs)."""
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    kept(alice, "/boards/vision/data/runs?asked=for-the-log")  # past its first load
    (log,) = server.data_dir.glob("boards/*.log")
    assert "load cycle" not in log.read_text()


def test_no_answer_is_kept_when_the_operator_turns_the_cache_off(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = serving(make_server(board_answer_cache_seconds="0"))
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    answers = [alice.get("/boards/vision/data/runs", headers=JSON) for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 3
    assert all(CACHE not in a.headers for a in answers)
    # The board's mark that nginx reads is never shown to a reader.
    assert all("X-Tbhub-Board-Loaded" not in a.headers for a in answers)
