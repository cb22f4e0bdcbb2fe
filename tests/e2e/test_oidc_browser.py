"""The whole OIDC code flow once in a real Chromium: tbhub behind its nginx, a real OpenID
provider (oidc-provider), then the board of a project the new account is added to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer
from tests.oidc_provider import CLIENT_ID, CLIENT_SECRET, oidc_provider


def test_a_browser_signs_in_at_the_provider_and_opens_a_board(
    make_server: Callable[..., TbhubServer], browser: Browser, tmp_path: Path
) -> None:
    server = make_server()
    with oidc_provider(tmp_path, [f"{server.base_url}/auth/oidc/callback"]) as provider:
        provider.set_account("olivia", email="olivia@example.test", name="Olivia O")
        server.env.update({
            "TBHUB_OIDC_DISCOVERY_URL": provider.discovery_url,
            "TBHUB_OIDC_CLIENT_ID": CLIENT_ID,
            "TBHUB_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "TBHUB_OIDC_PROVIDER_NAME": "Example SSO",
            "TBHUB_LOCAL_LOGIN": "false",
        })  # fmt: skip
        write_project(server.add_project("vision"), runs=2, steps=20, tags=1)
        server.start()

        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(f"{server.base_url}/")
            assert page.url.startswith(f"{server.base_url}/auth/login")
            assert page.locator("input[name=password]").count() == 0
            page.click("text=Sign in with Example SSO")
            page.fill("input[name=login]", "olivia")
            page.fill("input[name=password]", "any")
            page.click("button[type=submit]")
            page.click("button:has-text('Continue')")  # the provider's consent
            page.wait_for_url(f"{server.base_url}/")
            assert "olivia" in page.content()

            server.cli("admin", "project", "add-member", "vision", "olivia", "--role", "viewer")
            page.goto(f"{server.base_url}/boards/vision/")
            page.wait_for_selector("tb-webapp", timeout=60_000, state="attached")
            page.wait_for_selector("text=run-01", timeout=30_000)
        finally:
            context.close()
