"""The plugins a project turns on and off, in a real Chromium through nginx, with a real board:
the board bar says why the projector's tab is missing and leads an owner to the project's
board page; the owner turns the projector on there and the board is replaced with a PROJECTOR
tab (embeddings written by tensorboardX), then off and the tab is gone again; a viewer sees the
state with no button, is told to ask an owner, and gets 403 on the form. axe-core on every
tbhub page and on the bar."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tbhub.core.models import Role
from tbhub.domain.projects import set_membership
from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.ui import check_page, signed_in
from tests.forms import form_token

BOARD_TIMEOUT_MS = 60_000
BAR = ["#tbhub-bar", "#tbhub-plugins-off", "#tbhub-plugin-errors"]  # tbhub's own elements
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    """alice owns `vision`, whose run has scalars and an embedding (tensorboardX, as a job
    writes them); carol is its viewer."""
    from tensorboardX import SummaryWriter

    root = tmp_path_factory.mktemp("plugins")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        for name in ("alice", "carol"):
            server.add_user(name, f"{name}-password")
        run = server.add_project("vision", owner="alice") / "run-01"
        write_run(run, steps=10, tags=1)
        writer = SummaryWriter(str(run))
        rng = np.random.default_rng(0)
        writer.add_embedding(rng.random((20, 4)), metadata=[f"p{i}" for i in range(20)],
                             global_step=0, tag="points")  # fmt: skip
        writer.close()
        assert (run / "projector_config.pbtxt").is_file()
        with server.db() as session:
            set_membership(session, project="vision", user="carol", role=Role.viewer,
                           actor="test")  # fmt: skip
        server.start()
        yield server
    finally:
        server.cleanup()


def listing(client: httpx.Client) -> dict[str, Any]:
    """The board's plugins listing (what TensorBoard's tabs come from), or {} before it
    answers."""
    response = client.get("/boards/vision/data/plugins_listing", headers=JSON)
    return response.json() if response.status_code == 200 else {}  # type: ignore[no-any-return]


def wait_for_projector(client: httpx.Client, *, loaded: bool) -> None:
    """The board now serving has (or lacks) the projector, and, loaded, has found the run's
    embedding (the plugin decides that in a thread after its first listing)."""

    def settled() -> bool:
        plugins = listing(client)
        if not plugins:
            return False
        if not loaded:
            return "projector" not in plugins
        return bool(plugins.get("projector", {}).get("enabled"))

    wait_until(settled, timeout=90, what=f"a board {'with' if loaded else 'without'} projector")


def tabs(page: Page) -> str:
    """TensorBoard's dashboard tabs, as shown, upper case."""
    selector = page.locator("plugin-selector")
    selector.get_by_text("Scalars", exact=False).first.wait_for(timeout=BOARD_TIMEOUT_MS)
    return selector.inner_text().upper()


def open_board(page: Page, server: TbhubServer) -> None:
    page.goto(f"{server.base_url}/boards/vision/")
    page.wait_for_selector("#tbhub-bar", timeout=BOARD_TIMEOUT_MS)


def board_with_tab(page: Page, server: TbhubServer, *, shown: bool) -> None:
    """The board, opened in the browser until its PROJECTOR tab is `shown` (or not): for a
    few seconds after the swap nginx's cached "let in" may still send this browser to the
    board being replaced (domain/boards.py, upstream_hold_seconds)."""

    def settled() -> bool:
        open_board(page, server)
        return ("PROJECTOR" in tabs(page)) is shown

    wait_until(settled, timeout=60, what=f"the PROJECTOR tab {'shown' if shown else 'gone'}")


def test_the_owner_turns_the_projector_on_and_off_from_the_bar_and_the_board_follows(
    server: TbhubServer, browser: Browser
) -> None:
    alice_api = server.sign_in("alice", "alice-password")
    wait_for_projector(alice_api, loaded=False)
    context, page = signed_in(browser, server.base_url, "alice")
    try:
        open_board(page, server)
        assert "PROJECTOR" not in tabs(page)
        # The bar says why the tab is missing and leads the owner to the toggle.
        off = page.locator('#tbhub-bar [data-tbhub="plugins-off"]')
        expect(off).to_have_text("PROJECTOR, PYTORCH_PROFILER off")
        off.click()
        item = page.locator('#tbhub-plugins-off li[data-plugin="projector"]')
        expect(item).to_contain_text("projector is off (reads checkpoint files outside the logdir")
        expect(item).to_contain_text("Turn it on on this project's Board page")
        assert page.locator("#tbhub-plugin-errors").count() == 0  # no plugin failed
        check_page(page, "board-plugins-off-owner", include=BAR)
        item.get_by_role("link", name="Turn projector on").click()
        page.wait_for_url(f"{server.base_url}/projects/vision/board*")
        check_page(page, "board-page-owner")

        row = page.locator('tr[data-plugin="projector"]')
        expect(row).to_contain_text("off")
        row.get_by_role("button", name="Turn on projector").click()
        expect(page.get_by_role("status").first).to_contain_text("Plugin turned on")
        expect(row).to_contain_text("on")
        check_page(page, "board-page-plugin-on")
        wait_for_projector(alice_api, loaded=True)
        board_with_tab(page, server, shown=True)
        # Only the profiler, off by default too, is still named.
        expect(page.locator('#tbhub-bar [data-tbhub="plugins-off"]')).to_have_text(
            "PYTORCH_PROFILER off"
        )

        page.goto(f"{server.base_url}/projects/vision/board")
        page.get_by_role("button", name="Turn off projector").click()
        expect(page.get_by_role("status").first).to_contain_text("Plugin turned off")
        wait_for_projector(alice_api, loaded=False)
        board_with_tab(page, server, shown=False)
        expect(page.locator('#tbhub-bar [data-tbhub="plugins-off"]')).to_have_text(
            "PROJECTOR, PYTORCH_PROFILER off"
        )
    finally:
        context.close()


def test_a_viewer_sees_the_state_but_no_control_and_is_told_to_ask_an_owner(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "carol")
    try:
        page.goto(f"{server.base_url}/projects/vision/board")
        row = page.locator('tr[data-plugin="projector"]')
        expect(row).to_contain_text("off")
        assert page.get_by_role("button", name="Turn on projector").count() == 0
        assert page.locator('form[action="/projects/vision/board/plugins"]').count() == 0
        expect(
            page.get_by_text("Only a project owner turns them on or off: ask one.")
        ).to_be_visible()
        check_page(page, "board-page-viewer")

        open_board(page, server)
        page.locator('#tbhub-bar [data-tbhub="plugins-off"]').click()
        item = page.locator('#tbhub-plugins-off li[data-plugin="projector"]')
        expect(item).to_contain_text("A project owner turns it on: ask one.")
        assert item.get_by_role("link").count() == 0
        check_page(page, "board-plugins-off-viewer", include=BAR)
    finally:
        context.close()

    carol = server.sign_in("carol", "carol-password")
    token = form_token(
        carol, "/projects/vision/board"
    )  # her own valid token: only the role is wrong
    form = {"plugin": "projector", "state": "on", "csrf_token": token}
    refused = carol.post(
        "/projects/vision/board/plugins", data=form, headers={"Accept": "text/html"}
    )
    assert refused.status_code == 403
    alice = server.sign_in("alice", "alice-password")
    board = alice.get("/api/v1/projects/vision/board").json()
    assert board["settings"]["plugins"] == []


def test_the_bar_names_a_plugin_that_failed_to_load_and_nothing_without_the_field(
    server: TbhubServer, browser: Browser
) -> None:
    """The board status's `plugin_errors` (filled by the plugin loader) as the bar shows it:
    the real answer of the bar route, with the field set, and with it absent."""
    context, page = signed_in(browser, server.base_url, "carol")
    failed = [{"plugin": "profile", "error": "ImportError: no module named <b>xprof</b>"}]

    def with_errors(route: Route) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "plugin_errors": failed})

    def without_field(route: Route) -> None:
        answer = route.fetch()
        body = {k: v for k, v in answer.json().items() if k != "plugin_errors"}
        route.fulfill(response=answer, json=body)

    try:
        page.route("**/api/v1/boards/vision/bar", with_errors)
        open_board(page, server)
        panel = page.locator("#tbhub-plugin-errors")
        expect(panel.locator("li")).to_have_text(
            "plugin profile failed to load: ImportError: no module named <b>xprof</b>"
        )  # as text: nothing in an error becomes markup
        check_page(page, "board-plugin-errors", include=BAR)
        panel.get_by_role("button", name="Dismiss").click()
        expect(panel).to_have_count(0)

        page.unroute("**/api/v1/boards/vision/bar")
        page.route("**/api/v1/boards/vision/bar", without_field)
        open_board(page, server)
        expect(page.locator('#tbhub-bar [data-tbhub="plugins-off"]')).to_have_text(
            "PROJECTOR, PYTORCH_PROFILER off"
        )
        assert page.locator("#tbhub-plugin-errors").count() == 0
    finally:
        context.close()
