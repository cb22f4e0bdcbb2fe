"""The frame every page shares, in a real Chromium: sign-in, the header with its navigation
and sign-out, keyboard focus, small and large screens, and axe-core on each."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Browser

from tests.e2e.harness import TbhubServer
from tests.e2e.ui import check_page, sign_in


def test_signed_out_page_sends_the_browser_to_sign_in_and_back(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_project("vision", owner="alice")
    server.start()
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{server.base_url}/?q=vis")
        assert page.url == f"{server.base_url}/auth/login?next=%2F%3Fq%3Dvis"
        check_page(page, "sign-in")
        page.get_by_label("User name").fill("alice")
        page.get_by_label("Password").fill("alice-password")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{server.base_url}/?q=vis")
        nav = page.get_by_role("navigation", name="Main")
        assert nav.get_by_role("link", name="Projects").get_attribute("aria-current") == "page"
        assert nav.get_by_role("link", name="Admin").count() == 0  # alice is no admin

        # The first Tab reaches the skip link, visibly; it moves focus to the content.
        page.keyboard.press("Tab")
        skip = page.get_by_role("link", name="Skip to content")
        assert skip.evaluate("el => el === document.activeElement")
        assert skip.evaluate("el => getComputedStyle(el).outlineStyle") != "none"

        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url(f"{server.base_url}/auth/login")
        page.goto(f"{server.base_url}/")
        assert page.url.startswith(f"{server.base_url}/auth/login")
    finally:
        context.close()


def test_the_frame_fits_a_phone_and_a_4k_screen(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    server = make_server()
    server.add_user("root", "root-password", admin=True)
    server.add_project("a-project-with-a-rather-long-name-for-a-phone", owner="root")
    server.start()
    for width, height, name in ((360, 740, "phone"), (3840, 2160, "4k")):
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            sign_in(page, server.base_url, "root", "root-password")
            assert page.get_by_role("link", name="Admin").is_visible()
            # Nothing wider than the screen: the page never scrolls sideways.
            overflow = page.evaluate("() => document.documentElement.scrollWidth - innerWidth")
            assert overflow <= 0, f"{name}: the page is {overflow}px wider than the screen"
            check_page(page, f"projects-{name}")
        finally:
            context.close()
