from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.e2e.harness import TbhubServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def make_server(tmp_path: Path, database_url: str) -> Iterator[type[TbhubServer]]:
    """Build servers on this test's database; every one is cleaned up, even on failure."""
    servers: list[TbhubServer] = []

    def build(**settings: str) -> TbhubServer:
        server = TbhubServer(tmp_path / f"s{len(servers)}", database_url, **settings)
        servers.append(server)
        return server

    yield build  # type: ignore[misc]
    for server in servers:
        server.cleanup()


# Debian's chromium; Playwright never downloads a browser here.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
