from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
