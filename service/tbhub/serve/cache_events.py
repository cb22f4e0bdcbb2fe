"""Cache invalidations between replicas of one PostgreSQL installation: a bump in any
process of a `tbhub serve` (core/cache_generations.py) is announced with `NOTIFY`, and one
thread in every other `tbhub serve` LISTENs and bumps its own shared file in turn, so every
replica drops the cache at once instead of after its lifetime. A listener that lost its
connection drops every cache when it is back: it may have missed a notification."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from tbhub.core.cache_generations import CACHES, Generations
from tbhub.core.leader_lock import CONNECT_TIMEOUT, libpq_url
from tbhub.core.settings import Settings

log = logging.getLogger("tbhub.caches")

CHANNEL = "tbhub_caches"
RETRY_SECONDS = 1.0


def on_postgresql(database_url: str) -> bool:
    return make_url(database_url).get_backend_name() == "postgresql"


def announcer(engine: Engine, origin: str) -> Callable[[str], None]:
    """`Generations.announce` for a process of the server `origin` names: a NOTIFY with
    `<origin> <cache>`. A lost NOTIFY leaves the other replicas on their caches' lifetime."""

    def announce(cache: str) -> None:
        try:
            with engine.connect() as connection:
                payload = {"channel": CHANNEL, "payload": f"{origin} {cache}"}
                connection.execute(text("SELECT pg_notify(:channel, :payload)"), payload)
                connection.commit()
        except SQLAlchemyError as exc:
            log.warning("could not tell the other replicas to drop the %s cache: %s", cache, exc)

    return announce


class Writes:
    """Whether a session wrote anything: an ORM flush, or an INSERT, UPDATE or DELETE."""

    def __init__(self) -> None:
        self.seen = False

    def __bool__(self) -> bool:
        return self.seen

    def flushed(self, *_args: Any) -> None:
        self.seen = True

    def executed(self, state: ORMExecuteState) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            self.seen = True


def note_writes(session: Session) -> Writes:
    writes = Writes()
    event.listen(session, "after_flush", writes.flushed)
    event.listen(session, "do_orm_execute", writes.executed)
    return writes


def forget_everywhere(settings: Settings, factory: sessionmaker[Session]) -> None:
    """After a command outside `tbhub serve` (the admin CLI) committed a change: every
    process of a server on this host drops its caches (the data dir's counters), and every
    replica too (NOTIFY, on PostgreSQL). A counter file this user may not write leaves the
    servers on this host to their caches' lifetime; the change itself stands."""
    engine = factory.kw["bind"]
    try:
        generations = (Generations.in_data_dir(settings.data_dir)
                       if settings.data_dir.is_dir() else Generations())  # fmt: skip
    except OSError as exc:
        log.warning("could not tell this host's servers to drop their caches: %s", exc)
        generations = Generations()
    try:
        if on_postgresql(settings.db_url):
            generations.announce = announcer(engine, f"cli-{os.getpid()}")
        generations.bump_all()
    finally:
        generations.close()


class CacheListener:
    """In `tbhub serve`'s first process: the other replicas' bumps, applied to this one."""

    def __init__(self, database_url: str, generations: Generations, origin: str) -> None:
        self.database_url = database_url
        self.generations = generations
        self.origin = origin
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tbhub-caches", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        import psycopg  # PostgreSQL alone runs this (core/leader_lock.py)

        while not self._stop.is_set():
            try:
                with psycopg.connect(libpq_url(self.database_url), autocommit=True,
                                     connect_timeout=CONNECT_TIMEOUT,
                                     application_name="tbhub caches") as connection:  # fmt: skip
                    connection.execute(f"LISTEN {CHANNEL}")
                    # Whatever was announced while nobody listened is lost: drop everything.
                    self.generations.bump_all(announce=False)
                    self.listening.set()
                    while not self._stop.is_set():
                        for notice in connection.notifies(timeout=RETRY_SECONDS):
                            self.apply(notice.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("cache invalidations from other replicas: %s; retrying", exc)
                self._stop.wait(RETRY_SECONDS)

    def apply(self, payload: str) -> None:
        """A bump another replica announced (this server's own are already applied)."""
        origin, _, cache = payload.partition(" ")
        if origin != self.origin and cache in CACHES:
            self.generations.bump(CACHES.index(cache), announce=False)
