"""Own-origin mode through the real nginx: each board at <project>.<board domain> with a
cookie of its own, entered with a short pass from tbhub's origin; tbhub's origin never
serves board content, and no cookie or pass works for another board."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import JSON

DOMAIN = "boards.test"


def get(server: TbhubServer, host: str | None, path: str, cookie: str = "") -> httpx.Response:
    """A request to nginx as if to `host` (no DNS needed), cookies given by hand."""
    headers = {**JSON, "Cookie": cookie}
    if host is not None:
        headers["Host"] = f"{host}:{server.http_port}"
    return httpx.get(f"{server.base_url}{path}", headers=headers, timeout=10)


def local(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_boards_live_on_their_own_origins_with_their_own_cookies(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(board_domain=DOMAIN)
    server.add_user("alice", "alice-password")
    server.add_user("bob", "bob-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=10, tags=1)
    write_project(server.add_project("audio", owner="bob"), runs=1, steps=10, tags=1)
    server.start()
    session = "tbhub_session=" + server.sign_in("alice", "alice-password").cookies["tbhub_session"]
    vision, audio = f"vision.{DOMAIN}", f"audio.{DOMAIN}"

    # tbhub's origin sends boards away to their own origin, even for a member.
    away = get(server, None, "/boards/vision/data/runs", session)
    assert away.status_code == 302
    assert away.headers["location"] == f"http://{vision}:{server.http_port}/boards/vision/data/runs"
    # The board origin ignores tbhub's session cookie and asks tbhub's origin for a pass.
    ask = get(server, vision, "/boards/vision/data/runs", session)
    assert ask.status_code == 302 and "/auth/board-pass?project=vision" in ask.headers["location"]
    granted = get(server, None, local(ask.headers["location"]), session)
    assert granted.status_code == 302
    enter = granted.headers["location"]
    assert enter.startswith(f"http://{vision}:{server.http_port}/_tbhub/enter?pass=")
    # The pass is for vision only.
    assert get(server, audio, local(enter)).status_code == 403
    entered = get(server, vision, local(enter))
    assert entered.status_code == 303 and entered.headers["location"] == "/boards/vision/data/runs"
    board_cookie = entered.headers["set-cookie"].split(";")[0]
    assert board_cookie.startswith("tbhub_board=") and "Domain" not in entered.headers["set-cookie"]

    runs = wait_until(
        lambda: (r := get(server, vision, "/boards/vision/data/runs", board_cookie))
        .status_code == 200 and r.json(),
        timeout=60, what="the board on its own origin",
    )  # fmt: skip
    assert sorted(runs) == ["run-00", "run-01"]  # type: ignore[arg-type]
    # vision's cookie opens nothing on audio's origin, nor tbhub's API.
    assert get(server, audio, "/boards/audio/data/runs", board_cookie).status_code == 302
    assert get(server, vision, "/api/v1/projects", board_cookie).status_code == 404
    assert get(server, None, "/api/v1/projects", board_cookie).status_code == 401
    # A non-member gets no pass, and learns no more than for a project that does not exist.
    bob = "tbhub_session=" + server.sign_in("bob", "bob-password").cookies["tbhub_session"]
    assert get(server, None, "/auth/board-pass?project=vision", bob).status_code == 404
