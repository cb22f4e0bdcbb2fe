"""The engine's pool pings a connection before handing it out again only once it has been idle
(core/db.PING_AFTER_IDLE): a busy server skips a round trip per checkout, and a connection
the database dropped meanwhile is still replaced before any request sees it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from tbhub.core.db import make_engine


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    made = make_engine(database_url, threads=1, ping_after_idle=0.2)
    yield made
    made.dispose()


def counted_pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    ping = engine.dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        pings.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counting)
    return pings


def test_a_connection_back_a_moment_ago_is_handed_out_without_a_ping(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = counted_pings(engine, monkeypatch)
    for _ in range(5):
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1
    assert pings == []
    time.sleep(0.3)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar() == 1
    assert pings == [1]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_an_idle_connection_the_database_dropped_is_replaced_before_use(engine: Engine) -> None:
    with engine.connect() as connection:
        first = connection.execute(text("SELECT pg_backend_pid()")).scalar()
    killer = make_engine(engine.url.render_as_string(hide_password=False), threads=1)
    try:
        with killer.connect() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
            connection.commit()
    finally:
        killer.dispose()
    time.sleep(0.3)
    with engine.connect() as connection:  # no error: the ping found it gone
        assert connection.execute(text("SELECT pg_backend_pid()")).scalar() != first
