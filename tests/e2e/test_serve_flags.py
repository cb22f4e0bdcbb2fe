"""`tbhub serve --host --port --data-dir` on a real server: each flag wins over its TBHUB_*
variable, and with no public URL set anywhere, it follows the port."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import TbhubServer
from tests.ports import free_port

pytestmark = pytest.mark.e2e
PASSWORD = "a-long-enough-password"


def test_serve_flags_win_over_the_environment(
    make_server: type[TbhubServer], tmp_path: Path
) -> None:
    server = make_server()
    env_data_dir = tmp_path / "data-dir-from-env"
    # What the environment says: another address, another port, another data dir.
    server.env.update(TBHUB_HTTP_HOST="127.0.0.2", TBHUB_HTTP_PORT=str(free_port()),
                      TBHUB_DATA_DIR=str(env_data_dir))  # fmt: skip
    del server.env["TBHUB_PUBLIC_URL"]
    server.add_user("alice", PASSWORD)
    server.add_project("vision", owner="alice")
    server.start("--host", "127.0.0.1", "--port", str(server.http_port),
                 "--data-dir", str(server.data_dir))  # fmt: skip
    # start() waited for /healthz through nginx at 127.0.0.1:<the --port>.
    client = server.sign_in("alice", PASSWORD)
    assert [p["name"] for p in client.get("/api/v1/projects").json()] == ["vision"]
    assert (server.data_dir / "nginx" / "nginx.conf").is_file() and not env_data_dir.exists()
    assert f"open http://127.0.0.1:{server.http_port}\n" in server.log()
