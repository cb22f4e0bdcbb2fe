"""A real Chromium, driven by Playwright: sign in, wait on the starting page, read the board,
and send the heartbeat from the board page."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Browser

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer


def test_browser_signs_in_waits_and_sees_the_board_then_sends_heartbeats(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=50, tags=1)
    server.start()

    context = browser.new_context()
    try:
        page = context.new_page()
        page.clock.install()
        page.goto(f"{server.base_url}/boards/vision/")
        assert page.url.startswith(f"{server.base_url}/auth/login?next=")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-password")
        page.click("button[type=submit]")
        # The starting page reloads itself until TensorBoard answers.
        page.wait_for_selector("tb-webapp", timeout=60_000, state="attached")
        assert page.url.startswith(f"{server.base_url}/boards/vision/")
        page.wait_for_selector("text=run-01", timeout=30_000)

        with page.expect_request("**/api/v1/boards/vision/heartbeat", timeout=10_000) as beat:
            page.mouse.move(10, 10)
            page.clock.run_for(61_000)
        response = beat.value.response()
        assert response is not None and response.status == 204
    finally:
        context.close()
