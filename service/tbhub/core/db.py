"""Engine and sessions, built from settings (never at import time), and migrations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.resources import alembic_dir

if TYPE_CHECKING:
    from alembic.config import Config

# Starlette runs sync routes and dependencies on anyio's threadpool, 40 threads at most; a
# request holds at most its own session's connection and one of a domain function's own
# transaction. A pool of at least threads x connections never makes a request wait on
# another that waits on the pool (SQLAlchemy's default, 5 + 10, stalled every request).
# One connection per thread stays open between requests: with only 10 kept, a busy API
# closed and opened connections all the time (a PostgreSQL backend started for each; on
# SQLite, its pragmas run again), a good part of a registration's cost at 64 clients.
# With API workers (TBHUB_API_WORKERS) the threads are shared out among the processes, so
# that N workers hold no more database connections than one process did (PostgreSQL's
# default max_connections is 100), with at least MIN_REQUEST_THREADS each.
REQUEST_THREADS = 40
MIN_REQUEST_THREADS = 10
CONNECTIONS_PER_REQUEST = 2


def request_threads(api_workers: int = 1) -> int:
    """The request threads (and so the kept connections) of one process of `api_workers`."""
    return max(MIN_REQUEST_THREADS, -(-REQUEST_THREADS // api_workers))


# A connection given back less than this long ago is handed out again without a ping: it was
# working a moment ago, and under load (connections back within milliseconds) a ping was one
# more round trip per checkout, two per run registration. One idle longer is pinged first,
# and replaced if the database restarted or dropped it meanwhile.
PING_AFTER_IDLE = 1.0


def make_engine(
    url: str, *, threads: int = REQUEST_THREADS, ping_after_idle: float = PING_AFTER_IDLE,
    **pool: Any,
) -> Engine:  # fmt: skip
    """The engine for `url`, for a process with `threads` request threads; `pool` overrides
    the connection pool's options (tests)."""
    kwargs: dict[str, Any] = {}
    if not _in_memory(url):
        # Kept open: one per thread; the overflow, closed when given back, the second.
        kwargs.update(pool_size=threads, max_overflow=threads * (CONNECTIONS_PER_REQUEST - 1))
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    kwargs.update(pool)
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
    if not kwargs.get("pool_pre_ping"):
        _ping_when_idle(engine, ping_after_idle)
    return engine


def _ping_when_idle(engine: Engine, idle: float) -> None:
    """SQLAlchemy's pre-ping, for connections idle `idle` seconds or more only: a failed
    ping makes the pool drop that connection and hand out another (DisconnectionError)."""

    def given_back(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def taken(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < idle:
            return  # new, or back a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection is gone: {exc}") from exc

    event.listen(engine.pool, "checkin", given_back)
    event.listen(engine.pool, "checkout", taken)


def _in_memory(url: str) -> bool:
    """An in-memory SQLite database, whose pool keeps one connection per thread, not a queue."""
    return url.startswith("sqlite") and (url.rstrip("/") == "sqlite:" or ":memory:" in url)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the auth hook read while the supervisor writes; FKs are off by default.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error (all or nothing)."""
    with factory() as session, session.begin():
        yield session


def alembic_config(url: str) -> Config:
    from alembic.config import Config  # migrations only: not in an API worker's memory

    config = Config()
    config.set_main_option("script_location", str(alembic_dir()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)
