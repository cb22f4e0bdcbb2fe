"""The project page's prerender in a real Chromium, driven the way a tab-aware client attaches
(tests/support/tab_cdp.py; under Playwright Chromium prerenders nothing): opening the project
page of a stopped board starts it through the gate with no click, and the click on "Open
board" then shows the page Chromium drew while it was hidden. And the page's rules follow
the board (under Playwright: they are the page's DOM): gone when the board stops under the
open page, back when it serves again."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import expect

from tbhub.core.models import ObservedState
from tbhub.storage.sample_logs import write_project
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import board_row
from tests.e2e.test_board_page_browser import signed_in
from tests.e2e.test_boards import wait_for_board
from tests.ports import free_port
from tests.support.tab_cdp import Browser, CdpError, Tab

LINK = "document.querySelector('a[data-opens=whole-project]')"
# What the shown page is: its path, whether Chromium prerendered it (it was activated after
# its document began), and whether TensorBoard's app is on it with a run listed.
SHOWN = """
(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  return [location.pathname, Boolean(nav && nav.activationStart > 0),
          Boolean(document.querySelector("tb-webapp"))
          && document.body.innerText.includes("run-01")];
})()
"""


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Browser]:
    browser = Browser(CHROMIUM, CHROMIUM_ARGS, tmp_path / "profile", "", port=free_port())
    try:
        yield browser
    finally:
        browser.close()


def stopped_board_server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    """vision's board started once (the zygote warm), then stopped."""
    server = make_server(board_start_hold="4")
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    server.start()
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")
    server.cli("admin", "board", "stop", "vision")
    wait_until(lambda: not list(server.board_state_dir.glob("*.json")), timeout=60,
               what="the board to stop")  # fmt: skip
    return server


def shown(tab: Tab) -> list[object]:
    try:
        return list(tab.evaluate(SHOWN))
    except CdpError:  # between documents
        return []


def test_opening_the_project_page_starts_a_stopped_board_and_the_click_shows_it_drawn(
    make_server: Callable[..., TbhubServer], chromium: Browser
) -> None:
    server = stopped_board_server(make_server)
    alice = server.sign_in("alice", "alice-password")
    cookies = [{"name": name, "value": value, "url": server.base_url}
               for name, value in alice.cookies.items()]  # fmt: skip
    tab = chromium.new_tab(incognito=True, cookies=cookies)
    try:
        tab.navigate(f"{server.base_url}/projects/vision")
        # Nothing clicked: the page's prerender asks for the board, and the gate starts it.
        wait_until(lambda: board_row(server).observed_state == ObservedState.ready,
                   timeout=60, what="the prerender to start the board")  # fmt: skip
        time.sleep(2)  # TensorBoard's page drawn in the hidden prerender meanwhile
        tab.evaluate(f"{LINK}.click()")
        wait_until(lambda: shown(tab)[:1] == ["/boards/vision/"] and shown(tab)[2], timeout=60,
                   what="TensorBoard's page with its runs shown")  # fmt: skip
        path, prerendered, drawn = shown(tab)
        assert (path, prerendered, drawn) == ("/boards/vision/", True, True), chromium.errors
    finally:
        tab.close()


def test_the_rules_go_when_the_board_stops_under_the_open_page_and_come_back_when_it_serves(
    make_server: Callable[..., TbhubServer], browser: PlaywrightBrowser
) -> None:
    """A board stopped (idle, or by an admin) while its project page stays open: the page's
    live state drops its Speculation Rules, so the click cannot show a prerendered page with
    no board behind it; when someone opens the board again, the rules come back."""
    server = stopped_board_server(make_server)
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    context = signed_in(browser, server)
    try:
        page = context.new_page()
        session = context.new_cdp_session(page)
        rule_sets: list[dict[str, object]] = []
        session.on("Preload.ruleSetUpdated", lambda event: rule_sets.append(event["ruleSet"]))
        session.send("Preload.enable")
        page.goto(f"{server.base_url}/projects/vision")
        rules = page.locator('script[type="speculationrules"]')
        expect(rules).to_have_count(1)
        server.cli("admin", "board", "stop", "vision")
        badge = page.locator('[data-board-state="vision"]')
        expect(badge).to_have_text("stopped", timeout=30_000)
        expect(rules).to_have_count(0)
        wait_for_board(alice, "vision")  # someone else opens it
        expect(badge).to_have_text("live", timeout=30_000)
        expect(rules).to_have_count(1)
        assert '"/boards/vision/"' in (rules.text_content() or "")
        # Chromium took the re-added rules as it took the page's own: parsed, past the CSP.
        wait_until(lambda: len(rule_sets) == 2, timeout=10, what="the re-added rules")
        assert all("errorType" not in r for r in rule_sets), rule_sets
    finally:
        context.close()
