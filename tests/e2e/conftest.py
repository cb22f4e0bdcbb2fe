from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.conftest import DATABASES, empty_database
from tests.e2e.harness import TbhubServer
from tests.e2e.jobs_hub import Hub, running_hub

pytestmark = pytest.mark.e2e

# End-to-end paths mostly exercise processes, nginx and files, not the database: they run on
# SQLite. Modules whose flows depend on the database kind (the board gate's core flows,
# adoption after a crash) ask for every database with `BOTH_DATABASES`; every in-process
# database test runs on both anyway. TBHUB_TEST_E2E_DATABASES overrides the default.
E2E_DATABASES = os.environ.get("TBHUB_TEST_E2E_DATABASES", "sqlite").split(",")
BOTH_DATABASES = pytest.mark.parametrize("database_url", DATABASES, indirect=True)


@pytest.fixture(params=E2E_DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_database(request.param, tmp_path) as url:
        yield url


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


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """One server per module for the training-job tests (tests/e2e/jobs_hub.py)."""
    with running_hub(tmp_path_factory.mktemp("hub")) as running:
        yield running


# Fixtures of the container backend tests: the daemon and a per-test installation id.
from tests.e2e.containers import board_image, docker_client, installation  # noqa: E402, F401
