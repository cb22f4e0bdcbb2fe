"""The projects page in a real Chromium against a real `tbhub serve` (nginx, supervisor,
TensorBoard): find a project with the search box, watch its board state change without a
reload, and create a project as an admin. One server for the module."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tbhub.models import Role
from tbhub.projects import set_membership
from tbhub.sample_logs import write_run
from tests.e2e.harness import TbhubServer
from tests.e2e.ui import check_page, sign_in

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    root = tmp_path_factory.mktemp("ui-projects")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        server.add_user("root", "root-password", admin=True)
        server.add_user("alice", "alice-password")
        for name in ("vision", "speech", "secret"):
            server.add_project(name)
        with server.db() as session:
            for project in ("vision", "speech"):
                set_membership(session, project=project, user="alice", role=Role.editor,
                               actor="test")  # fmt: skip
        write_run(server.storage / "vision" / "baseline", steps=20)
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def alice(server: TbhubServer, browser: Browser) -> Iterator[Page]:
    context: BrowserContext = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "alice", "alice-password")
        yield page
    finally:
        context.close()


def test_find_a_project_with_the_search_box(server: TbhubServer, alice: Page) -> None:
    table = alice.get_by_role("table")
    expect(table.get_by_role("link", name="vision", exact=True)).to_be_visible()
    expect(table.get_by_role("link", name="secret", exact=True)).to_have_count(0)  # not hers
    check_page(alice, "projects")
    alice.get_by_label("Search projects").fill("vis")
    alice.get_by_role("button", name="Search").click()
    alice.wait_for_url(f"{server.base_url}/?q=vis")
    expect(table.get_by_role("link", name="vision", exact=True)).to_be_visible()
    expect(table.get_by_role("link", name="speech", exact=True)).to_have_count(0)
    check_page(alice, "projects-search")


def test_board_state_goes_live_on_the_page_without_a_reload(
    server: TbhubServer, alice: Page
) -> None:
    badge = alice.locator('[data-board-state="vision"]')
    expect(badge).to_have_text("stopped")
    alice.evaluate("() => { window.loadedOnce = true; }")  # gone if the page reloads
    # Someone opens the board elsewhere: the supervisor starts it.
    cookies = {c["name"]: c["value"] for c in alice.context.cookies()}
    with httpx.Client(base_url=server.base_url, cookies=cookies, timeout=10) as other:
        opened = other.get("/boards/vision/", headers={"Accept": "text/html"})
        assert opened.status_code == 200 and "vision" in opened.text  # "starting" page
    expect(badge).to_have_text("live", timeout=90_000)
    assert "state-live" in (badge.get_attribute("class") or "")
    assert alice.evaluate("() => window.loadedOnce === true")


def test_an_admin_creates_a_project_from_the_page(server: TbhubServer, browser: Browser) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "root", "root-password")
        page.get_by_label("Project name").fill("fresh-project")
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("status")).to_have_text("Project created.")
        table = page.get_by_role("table")
        expect(table.get_by_role("link", name="fresh-project", exact=True)).to_be_visible()
        assert (server.storage / "fresh-project").is_dir()
        page.get_by_label("Project name").fill("fresh-project")
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("alert")).to_contain_text("already exists")
        check_page(page, "projects-create-error")
    finally:
        context.close()
