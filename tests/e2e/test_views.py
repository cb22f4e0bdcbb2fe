"""Saved views through the real nginx, on real boards, in a real Chromium: a view saved from
the project page's filters opens a board over exactly its runs, says which view it is and
links the whole project; a big project opens on its default view; and the registry rules:
a new matching run appears on a running view's board and a trashed run leaves it (real
event files, the board's own /data/runs); the storage watcher puts no inotify watch on a view's
directories and logs no watch registered twice. `tbhub views` over the API.

One `tbhub serve` for the module: project vision (bob owns it, carol views it) with runs
keep-00, keep-01 and other-00 found by the storage watcher."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from tbhub.core.models import Project, Role, Run
from tbhub.domain.projects import set_membership
from tbhub.storage.compare_view import COMPARE_DIR_NAME
from tbhub.storage.sample_logs import write_project, write_run
from tests.e2e.harness import TBHUB, TbhubServer, wait_until
from tests.e2e.ui import check_page, sign_in
from tests.support.inotify_watches import directory_inodes, watched_inodes

JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    root = tmp_path_factory.mktemp("views")
    # Over 2 runs a project opens on its default view: vision has 3.
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}",
                         default_view_over_runs="2")  # fmt: skip
    try:
        server.add_user("bob", "bob-password")
        server.add_user("carol", "carol-password")
        vision = server.add_project("vision", owner="bob")
        write_project(vision, runs=2, steps=20, tags=1, prefix="keep")
        write_project(vision, runs=1, steps=20, tags=1, prefix="other")
        with server.db() as session:
            set_membership(session, project="vision", user="carol", role=Role.viewer,
                           actor="test")  # fmt: skip
        server.start()
        wait_until(lambda: len(run_ids(server)) == 3, timeout=60,
                   what="the watcher to find every run")  # fmt: skip
        yield server
    finally:
        server.cleanup()


def run_ids(server: TbhubServer) -> dict[str, int]:
    with server.db() as session:
        rows = session.execute(select(Run.path, Run.id).join(Project))
        return {path: run_id for path, run_id in rows}


def board_runs(client: httpx.Client, board_url: str) -> Any:
    """The runs the board lists through nginx, once it serves (None until then)."""
    response = client.get(f"{board_url}data/runs", headers=JSON)
    return sorted(response.json()) if response.status_code == 200 else None


def test_a_view_saved_from_the_filters_opens_a_board_over_exactly_its_runs(
    server: TbhubServer, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "bob", "bob-password", next_path="/projects/vision?q=keep")
        views = page.get_by_role("navigation", name="Saved views")
        expect(views).to_contain_text("Whole project (3 runs)")
        # 3 runs is over the limit of 2: the board opens on the default view.
        expect(page.locator("[data-opens=default-view]")).to_have_attribute(
            "href", "/projects/vision/views/default"
        )
        expect(page.locator("[data-opens=whole-project]")).to_have_attribute(
            "href", "/boards/vision/"
        )
        check_page(page, "views-project")
        page.get_by_text("Save these filters as a view").click()
        page.get_by_label("View name").fill("keepers")
        page.get_by_label("Shared with the project").check()
        page.get_by_role("button", name="Save view").click()
        page.wait_for_url(f"{server.base_url}/projects/vision/views/*")
        expect(page.get_by_role("heading", level=1)).to_contain_text("keepers")
        expect(page.get_by_text("2 of the project's 3 runs")).to_be_visible()
        check_page(page, "views-view")
        link = page.url.removeprefix(server.base_url)

        page.get_by_role("link", name="Open the view's board").click()
        page.wait_for_url(f"{server.base_url}/boards/cmp-*/**", timeout=10_000)
        board_url = "/boards/" + page.url.split("/boards/")[1].split("/")[0] + "/"
        page.wait_for_selector("tb-webapp", timeout=90_000, state="attached")
        for run in ("vision/keep-00", "vision/keep-01"):
            page.wait_for_selector(f"text={run}", timeout=60_000)
        assert page.get_by_text("vision/other-00").count() == 0, "not on the view"
        # The bar says which view this is, links its page and the whole project.
        bar = page.locator("#tbhub-bar")
        expect(bar).to_contain_text("View keepers")
        expect(bar.locator("[data-tbhub=board-page]")).to_have_attribute(
            "href", server.base_url + link
        )
        expect(bar.locator("[data-tbhub=whole-project]")).to_have_attribute(
            "href", f"{server.base_url}/boards/vision/"
        )
        runs = page.request.get(f"{server.base_url}{board_url}data/runs").json()
        assert sorted(runs) == ["vision/keep-00", "vision/keep-01"]

        # A viewer finds the shared view on the project page, and may not make one.
        carol = browser.new_context().new_page()
        sign_in(carol, server.base_url, "carol", "carol-password", next_path="/projects/vision")
        carol.get_by_role("navigation", name="Saved views").get_by_role(
            "link", name="keepers"
        ).click()
        expect(carol.get_by_role("heading", level=1)).to_contain_text("keepers")
        assert carol.url == server.base_url + link, "a permanent link"
        carol.goto(f"{server.base_url}/projects/vision")
        assert carol.get_by_text("Save these filters as a view").count() == 0
        carol.context.close()
    finally:
        context.close()


def test_the_default_view_page_says_what_it_shows_and_links_the_whole_project(
    server: TbhubServer, browser: Browser
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "carol", "carol-password", next_path="/projects/vision")
        page.locator("[data-opens=default-view]").click()
        page.wait_for_url(f"{server.base_url}/projects/vision/views/default")
        expect(page.get_by_role("heading", level=1)).to_contain_text("Recent, running and pinned")
        expect(page.get_by_text("the project's newest runs, its running runs")).to_be_visible()
        expect(page.locator("[data-opens=whole-project]")).to_have_attribute(
            "href", "/boards/vision/"
        )
        check_page(page, "views-default")
    finally:
        context.close()


def open_view(client: httpx.Client, name: str) -> tuple[str, Any]:
    """A view of vision's runs matching "keep", saved; its board's URL and first runs."""
    made = client.post("/api/v1/projects/vision/views",
                       json={"name": name, "filter": {"q": "keep"}})  # fmt: skip
    assert made.status_code == 201, made.text
    board_url = made.json()["board_url"]  # /boards/<the compare board's slug>/
    first = wait_until(lambda: board_runs(client, board_url), timeout=90, what="the view's board")
    return board_url, first


def test_a_running_views_board_follows_the_registry_new_runs_appear_trashed_runs_leave(
    server: TbhubServer,
) -> None:
    bob = server.sign_in("bob", "bob-password")
    board_url, first = open_view(bob, "follow")
    assert first == ["vision/keep-00", "vision/keep-01"]

    # A new run that matches: real event files, found by the watcher, linked into the view.
    write_run(server.storage / "vision" / "keep-02", run_index=2, steps=20, tags=1)
    write_run(server.storage / "vision" / "other-01", run_index=3, steps=20, tags=1)
    wait_until(lambda: "vision/keep-02" in (board_runs(bob, board_url) or []), timeout=120,
               what="the new matching run on the view's board")  # fmt: skip
    assert "vision/other-01" not in board_runs(bob, board_url), "it does not match"

    # A trashed run leaves the board (its links go; TensorBoard drops the deleted run).
    trashed = bob.delete(f"/api/v1/projects/vision/runs/{run_ids(server)['keep-00']}")
    assert trashed.status_code == 200, trashed.text
    wait_until(lambda: "vision/keep-00" not in (board_runs(bob, board_url) or ["vision/keep-00"]),
               timeout=120, what="the trashed run to leave the view's board")  # fmt: skip
    assert board_runs(bob, board_url) == ["vision/keep-01", "vision/keep-02"]


def test_the_storage_watcher_neither_watches_nor_warns_about_a_views_directories(
    server: TbhubServer,
) -> None:
    board_url, _runs = open_view(server.sign_in("bob", "bob-password"), "unwatched")
    view_dirs = directory_inodes(
        server.storage / COMPARE_DIR_NAME / board_url.strip("/").rsplit("/", 1)[1]
    )
    assert len(view_dirs) > 1, "the view holds its runs' directories"
    assert server.process is not None
    watched = watched_inodes(server.process.pid, children=True)
    assert (server.storage / "vision").stat().st_ino in watched, "the project is watched"
    assert not view_dirs & watched
    assert "already exists for watch" not in server.log()


def test_tbhub_views_lists_makes_and_deletes_views_over_the_api(
    server: TbhubServer, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TBHUB_")}
    env["TBHUB_CLIENT_CONFIG"] = str(tmp_path / "client.json")
    token = server.add_token("bob", ["vision"])

    def tbhub(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TBHUB, *args], input=stdin, env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    login = tbhub("login", "--url", server.base_url, "--token-stdin", stdin=token + "\n")
    assert login.returncode == 0, login.stderr
    made = tbhub("views", "create", "-p", "vision", "-n", "cli view", "--tag", "none-yet",
                 "--status", "running", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert view["runs"] == 0 and view["filter"] == {"status": ["running"], "tag": "none-yet"}
    assert view["board_url"].startswith(f"{server.base_url}/boards/cmp-")
    table = tbhub("views", "list", "-p", "vision")
    assert "cli view" in table.stdout and view["board_url"] in table.stdout
    bad = tbhub("views", "create", "-p", "vision", "-n", "bad", "--since", "yesterday", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["code"] == "invalid_input"
    gone = tbhub("views", "delete", str(view["id"]), "-p", "vision", "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout)["deleted"] == view["id"]
    listed = json.loads(tbhub("views", "list", "-p", "vision", "--json").stdout)
    assert view["id"] not in [v["id"] for v in listed]
