"""A share link through the real nginx: someone with no account reads one board, not
another, and loses it within the cache lifetimes once the link is revoked."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import JSON


def test_a_share_link_reads_one_board_until_it_is_revoked(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=10, tags=1)
    write_project(server.add_project("audio", owner="alice"), runs=1, steps=10, tags=1)
    server.start()
    created = json.loads(server.cli("admin", "share", "create", "vision", "--json").stdout)
    assert created["url"].startswith(server.base_url + "/share/tbs_")

    with httpx.Client(timeout=10) as guest:  # no account, a fresh browser
        opened = guest.get(created["url"])
        assert opened.status_code == 303 and opened.headers["location"] == "/boards/vision/"
        runs = wait_until(
            lambda: (r := guest.get(f"{server.base_url}/boards/vision/data/runs", headers=JSON))
            .status_code == 200 and r.json(),
            timeout=60, what="the shared board to list its runs",
        )  # fmt: skip
        assert sorted(runs) == ["run-00", "run-01"]  # type: ignore[arg-type]
        # The cookie is the browser's to scope; send it anywhere by hand and still get nothing.
        cookie = {"Cookie": f"tbhub_share={guest.cookies['tbhub_share']}", **JSON}
        assert (
            guest.get(f"{server.base_url}/boards/audio/data/runs", headers=cookie).status_code
            == 401
        )
        assert guest.get(f"{server.base_url}/api/v1/projects", headers=cookie).status_code == 401

        server.cli("admin", "share", "revoke", "vision", str(created["id"]))
        # Within the share-link cache (10 s) and nginx's cache of answers (5 s), with room.
        wait_until(
            lambda: guest.get(f"{server.base_url}/boards/vision/data/runs", headers=JSON)
            .status_code == 401,
            timeout=25, what="the revoked link to stop working",
        )  # fmt: skip
