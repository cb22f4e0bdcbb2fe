"""One `tbhub serve` per test module for training-job tests: a project `vision` with an
editor `bob`, a write and a read token, and a `tbhub login` file for the job's side."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tbhub.auth.tokens import create_token
from tbhub.core.models import Role, TokenScope
from tbhub.domain.projects import set_membership
from tbhub.domain.users import get_user
from tbhub.supervisor.board_settings import SettingsChange, update_settings
from tests.e2e.harness import TBHUB, TbhubServer, wait_until


@dataclass
class Hub:
    server: TbhubServer
    write_token: str
    read_token: str
    config: Path

    def env(self, **extra: str) -> dict[str, str]:
        """A job's environment: the login file, nothing of the server's settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TBHUB_")}
        return {**env, "TBHUB_CLIENT_CONFIG": str(self.config), **extra}

    def tbhub(
        self, *args: str, stdin: str | None = None, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TBHUB, *args], input=stdin, env=self.env(**extra),
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    def api(self, token: str | None = None) -> httpx.Client:
        client = self.server.client()
        client.headers["Authorization"] = f"Bearer {token or self.read_token}"
        return client

    def run(self, run_id: int) -> dict[str, object]:
        return self.api().get(f"/api/v1/projects/vision/runs/{run_id}").json()  # type: ignore[no-any-return]


@contextmanager
def running_hub(root: Path) -> Iterator[Hub]:
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        server.add_user("bob", "bob-password")
        server.add_project("vision")
        with server.db() as session:
            set_membership(session, project="vision", user="bob", role=Role.editor, actor="test")
            # The board picks up new event files within 2 s instead of the default 30 s.
            update_settings(session, project="vision", change=SettingsChange(reload_interval=2),
                            actor="test", now=datetime.now(UTC), backend="subprocess")  # fmt: skip
            bob = get_user(session, name="bob")
            _, write = create_token(session, user=bob, name="job", scope=TokenScope.write,
                                    projects=["vision"], expires_at=None, actor="test")  # fmt: skip
            _, read = create_token(session, user=bob, name="reader", scope=TokenScope.read,
                                   projects=["vision"], expires_at=None, actor="test")  # fmt: skip
        server.start()
        hub = Hub(server, write, read, root / "client" / "client.json")
        login = hub.tbhub("login", "--url", server.base_url, "--token-stdin", stdin=write + "\n")
        assert login.returncode == 0, login.stderr
        yield hub
    finally:
        server.cleanup()


def board_scalars(hub: Hub, run_path: str, tag: str, count: int) -> list[tuple[int, float]]:
    """(step, value) of a tag, read from the board through nginx with a read token, once it
    holds `count` points (the board reloads event files every 2 seconds)."""
    client = hub.api()

    def loaded() -> list[list[float]] | None:
        response = client.get("/boards/vision/data/plugin/scalars/scalars",
                              params={"run": run_path, "tag": tag})  # fmt: skip
        rows = response.json() if response.status_code == 200 else []
        return rows if len(rows) >= count else None

    rows = wait_until(loaded, timeout=90, what=f"{count} scalars of {run_path}/{tag} on the board")
    assert isinstance(rows, list)
    return [(int(step), value) for _, step, value in rows]
