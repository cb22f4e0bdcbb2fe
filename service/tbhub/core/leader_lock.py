"""The supervisor leader's PostgreSQL advisory lock, on a connection of its own.

Each replica keeps one connection open. It holds a shared "member" lock for the replica's
lifetime (so replicas can be counted and listed) and tries the exclusive "leader" lock
(DESIGN.md decision 12). Session-level advisory locks last as long as the session: a leader
that dies, even by SIGKILL, closes its socket and PostgreSQL drops its lock at once. A
leader whose host vanishes sends nothing at all; the TCP keepalives asked for here, on both
ends, make PostgreSQL end that session (and so free the lock) after about DEAD_PEER_SECONDS
of silence, and make the leader's own heartbeat fail in the same time.

The connection also LISTENs on WAKE_CHANNEL: a replica that records a wish for a board
(the auth hook, the API) notifies it, so the leader's supervisor starts a pass at once.

psycopg is imported where a function uses it (here, serve/replica.py, serve/cache_events.py),
which happens on PostgreSQL alone: on SQLite no process of a server loads it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    import psycopg

# Every advisory lock tbhub takes is an (int4, int4) pair: (LOCK_CLASS, one of the keys below).
# LOCK_CLASS spells "tbhu"; keys are scoped to the database, so two installations on one
# server never meet.
LOCK_CLASS = 0x74626875
LEADER = 1  # the supervisor leader (exclusive, held by one replica)
MEMBER = 2  # every replica (shared, held for its lifetime)
MIGRATIONS = 3  # one schema upgrade at a time (alembic/env.py)
JOB_KEYS = {"retention": 4, "backup": 5}  # one job of a kind at a time (jobs/config.py)
WAKE_CHANNEL = "tbhub_supervisor"

# TCP keepalives on the lock connection: first probe after IDLE s of silence, then every
# INTERVAL s, COUNT unanswered probes end it; unacknowledged data ends it after USER_TIMEOUT.
KEEPALIVE_IDLE = 3
KEEPALIVE_INTERVAL = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 6000
DEAD_PEER_SECONDS = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT
CONNECT_TIMEOUT = 5

# The server ends of the keepalives (PostgreSQL settings any user may set for a session).
SERVER_OPTIONS = " ".join(
    f"-c {name}={value}"
    for name, value in (
        ("tcp_keepalives_idle", KEEPALIVE_IDLE),
        ("tcp_keepalives_interval", KEEPALIVE_INTERVAL),
        ("tcp_keepalives_count", KEEPALIVE_COUNT),
        ("tcp_user_timeout", USER_TIMEOUT_MS),
    )
)


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL (postgresql+psycopg://...) as a libpq connection URL."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def key_fingerprint(secret_key: str) -> str:
    """8 hex digits that differ between secret keys, and reveal nothing about them."""
    return hmac.new(secret_key.encode(), b"tbhub replica", hashlib.sha256).hexdigest()[:8]


def replica_name(fingerprint: str, location: str, http_port: int) -> str:
    """The lock connection's application_name, which names a replica to the others and to
    `tbhub admin replicas`: "tbhub <key fingerprint> <board location> <host>:<port> pid <pid>".
    At most 63 bytes (PostgreSQL cuts longer names)."""
    host = socket.gethostname().split(".")[0][:16]
    return f"tbhub {fingerprint} {location} {host}:{http_port} pid {os.getpid()}"


@dataclass(frozen=True)
class ReplicaRow:
    name: str  # the replica's application_name (replica_name)
    leader: bool
    connected_at: datetime

    def _part(self, index: int) -> str:
        parts = self.name.split()
        return parts[index] if len(parts) > index else ""

    @property
    def fingerprint(self) -> str:
        return self._part(1)

    @property
    def location(self) -> str:
        return self._part(2)

    @property
    def address(self) -> str:
        """host:port pid N, as the replica announced itself."""
        return " ".join(self.name.split()[3:])


# Every live replica (holders of the member lock), whether it holds the leader lock, and
# whether it is the session asking. The keys are this module's integer constants.
REPLICAS_SQL = f"""
    SELECT a.application_name, a.backend_start,
           bool_or(l.objid = {LEADER} AND l.mode = 'ExclusiveLock') AS leader,
           a.pid = pg_backend_pid() AS asking
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.classid::bigint = {LOCK_CLASS}
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    GROUP BY a.pid, a.application_name, a.backend_start
    HAVING bool_or(l.objid = {MEMBER})
    ORDER BY leader DESC, a.backend_start
"""


def _rows(rows: Iterable[Sequence[Any]], *, skip_asking: bool) -> list[ReplicaRow]:
    return [
        ReplicaRow(name=str(row[0]), leader=bool(row[2]), connected_at=row[1])
        for row in rows
        if not (skip_asking and row[3])
    ]


def list_replicas(session: Session) -> list[ReplicaRow]:
    """The replicas connected to this database, the leader first."""
    return _rows(session.execute(text(REPLICAS_SQL)), skip_asking=False)


def notify_wake(session: Session) -> None:
    """Ask the leader's supervisor for a pass now (delivered when the session commits)."""
    session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": WAKE_CHANNEL})


def lock_connection(database_url: str, name: str) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection of its own for holding advisory locks, with the keepalives above, named
    `name` (its application_name) for pg_stat_activity."""
    import psycopg

    return psycopg.connect(
        libpq_url(database_url),
        autocommit=True,
        application_name=name[:63],
        connect_timeout=CONNECT_TIMEOUT,
        keepalives=1,
        keepalives_idle=KEEPALIVE_IDLE,
        keepalives_interval=KEEPALIVE_INTERVAL,
        keepalives_count=KEEPALIVE_COUNT,
        tcp_user_timeout=USER_TIMEOUT_MS,
        options=SERVER_OPTIONS,
    )


@contextmanager
def job_lock_held(database_url: str, job: str) -> Iterator[str | None]:
    """Hold the lock of `job` for the block. Yields None if it was taken, or the name of the
    session (a replica's or an admin command's) that holds it."""
    import psycopg

    conn = lock_connection(
        database_url, f"tbhub {job} job {socket.gethostname()} pid {os.getpid()}"
    )
    try:
        key = JOB_KEYS[job]
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key)).fetchone()
        if row and row[0]:
            try:
                yield None
            finally:
                # Unlock before closing: a closed connection's server process lets go of its
                # locks only as it exits, after close() returned, and the next job would
                # find the lock still held by a session that is gone.
                with suppress(psycopg.Error):  # a lost connection holds nothing
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, key))
            return
        holder = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = %s "
            "AND l.objid = %s AND l.objsubid = 2 AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            (LOCK_CLASS, key),
        ).fetchone()
        yield str(holder[0]) if holder else "another session"
    finally:
        conn.close()


class LeaderLock:
    """One replica's lock connection. Not thread-safe: one thread (the replica's) uses it."""

    def __init__(self, database_url: str, name: str) -> None:
        self.url = database_url
        self.name = name
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def connect(self) -> None:
        """Open the connection, take the member lock and listen for wake-ups."""
        self.close()
        conn = lock_connection(self.url, self.name)
        try:
            conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (LOCK_CLASS, MEMBER))
            conn.execute(f"LISTEN {WAKE_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def try_acquire(self) -> bool:
        """Take the leader lock if nobody holds it. Raises psycopg.Error on a lost connection."""
        row = (
            self._live()
            .execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, LEADER))
            .fetchone()
        )
        return bool(row and row[0])

    def confirm(self) -> None:
        """Prove the session (and so the lock) is still there with a round trip. Raises
        psycopg.Error when the connection is lost: the lock is gone with it."""
        self._live().execute("SELECT 1")

    def wait_for_wake(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a wake-up; True if someone asked for a pass."""
        return any(True for _ in self._live().notifies(timeout=timeout, stop_after=1))

    def others(self) -> list[ReplicaRow]:
        """The other replicas connected now."""
        return _rows(self._live().execute(REPLICAS_SQL), skip_asking=True)

    def close(self) -> None:
        """Close the connection; PostgreSQL drops both locks with the session."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _live(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            import psycopg

            raise psycopg.OperationalError("the lock connection is closed")
        return self._conn
