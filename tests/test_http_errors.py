"""Answers that must hold whatever goes wrong: one 500 that keeps the connection usable, a
commit before the 2xx, and a 503 while the database is unreachable. Real uvicorn, real
SQLite and PostgreSQL."""

from __future__ import annotations

import gc
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import Message, Receive, Scope, Send

from tbhub.core.db import upgrade
from tbhub.core.models import RetentionOverride
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.serve.app import build_context, create_app
from tests.conftest import TEST_SECRET, postgres_database
from tests.test_api import seed, sign_in


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """The app on a real uvicorn on a loopback port, as `tbhub serve` runs it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_an_unexpected_error_answers_500_once_and_keeps_the_connection(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(build_context(settings))

    @app.get("/api/v1/test-boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    with served(app) as port, caplog.at_level(logging.INFO):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/api/v1/test-boom")
        first = connection.getresponse()
        body = json.loads(first.read())
        assert first.status == 500
        assert body["error"]["code"] == "internal"
        assert first.getheader("connection") != "close"
        # The same kept-alive connection, as nginx reuses it from its pool.
        connection.request("GET", "/healthz")
        second = connection.getresponse()
        assert second.status == 200, second.read()
        second.read()
        connection.close()
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1
    assert "test-boom" in tracebacks[0].getMessage()


class CheckAtResponseStart:
    """Reads the database from a new session the moment the response starts to leave."""

    def __init__(self, app: FastAPI, factory: sessionmaker[Session]) -> None:
        self.app, self.factory = app, factory
        self.seen: list[int | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_and_check(message: Message) -> None:
            if message["type"] == "http.response.start" and scope["method"] == "PUT":
                with self.factory() as session:
                    override = session.scalar(select(RetentionOverride))
                    self.seen.append(override.keep_last if override else None)
            await send(message)

        await self.app(scope, receive, send_and_check)


def test_a_write_is_committed_before_its_2xx_leaves(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    seed(factory, settings)
    checker = CheckAtResponseStart(create_app(build_context(settings)), factory)
    with TestClient(checker, base_url="http://testserver") as client:  # type: ignore[arg-type]
        sign_in(client, "alice")
        for keep_last in (3, 7):
            body = {"keep_last": keep_last}
            assert client.put("/api/v1/projects/vision/retention", json=body).status_code == 200
    assert checker.seen == [3, 7]


class TcpProxy:
    """A loopback TCP forwarder that can be cut, to make a real database unreachable."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections: list[socket.socket] = []
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        self.open = False
        for connection in self.connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.connections = []

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def proxied_postgres() -> Iterator[tuple[str, TcpProxy]]:
    with postgres_database() as url:
        proxy = TcpProxy(("127.0.0.1", 5432))
        try:
            yield url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/"), proxy
        finally:
            proxy.close()


def test_an_unreachable_database_answers_503_with_retry_after(
    tmp_path: Path, proxied_postgres: tuple[str, TcpProxy]
) -> None:
    url, proxy = proxied_postgres
    settings = prepare_runtime(
        Settings(
            data_dir=tmp_path / "data",
            storage_root=tmp_path / "storage",
            database_url=url,
            secret_key=TEST_SECRET,
        )
    )
    upgrade(url)
    context = build_context(settings)
    seed(context.factory, settings)
    with TestClient(create_app(context), base_url="http://testserver") as client:
        sign_in(client, "alice")
        assert client.get("/api/v1/projects").status_code == 200

        proxy.cut()
        for path in ("/api/v1/projects", "/api/v1/projects/vision/retention"):
            response = client.get(path)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert response.json()["error"]["code"] == "database_unavailable"
        # A browser gets the 503 as a page, without the signed-in header (reading the user
        # would only wait on the database again).
        page = client.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 503 and 'data-code="database_unavailable"' in page.text
        assert "Sign out" not in page.text
        context.access.invalidate()
        hook = client.get("/_auth/board", headers={"X-Tbhub-Original-Uri": "/boards/vision/"})
        assert hook.status_code not in (200, 204)  # access stays denied
        assert client.get("/readyz").status_code == 503

        proxy.restore()
        assert client.get("/api/v1/projects").status_code == 200
    # Every connection made through the cut proxy is closed here, not at some later test's
    # garbage collection (psycopg warns about connections deleted while open).
    context.engine.dispose()
    gc.collect()
