"""This `tbhub serve`'s part among replicas: the leader, which runs the supervisor and the
jobs (duties.py), or a standby, which serves the API, the UI and the auth hook only.

On SQLite there is one server per database and it leads from the start (the data-dir lock
keeps a second one out of its data dir). On PostgreSQL a thread owns the lock connection
(leader_lock.py): a standby tries for the leader lock every `retry` seconds and writes the
board accesses its auth hook saw (the leader's supervisor does that on the leader); the
leader proves its session alive about every HEARTBEAT seconds and passes wake-ups from
other replicas on to its supervisor.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import ConfigError
from tbhub.core.leader_lock import DEAD_PEER_SECONDS, LeaderLock, ReplicaRow, notify_wake
from tbhub.domain.boards import AccessTracker, BoardRef, flush_access
from tbhub.supervisor.metrics import SupervisorMetrics

log = logging.getLogger("tbhub.replica")

HEARTBEAT = 1.0
# The supervisor acts only while the lock was proved held this recently. PostgreSQL drops a
# silent leader's session (and lock) no sooner than DEAD_PEER_SECONDS after the leader's last
# packet, so a leader cut off from the database stops acting before another can start.
LEASE = 3.0
assert LEASE < DEAD_PEER_SECONDS
# How long a standby leaving tries for the leader lock, to stop the boards if it is the last.
LAST_OUT_WAIT = 1.0


class Duties(Protocol):
    def start(self) -> None: ...
    def wake(self) -> None: ...
    def stop(self, *, stop_boards: bool) -> None: ...
    def stop_boards(self) -> None: ...


def board_location(where: str) -> str:
    """Where this replica's boards live (`backends.select.boards_place`), as 8 hex digits:
    replicas that may adopt each other's boards must agree on it."""
    return hashlib.sha256(where.encode()).hexdigest()[:8]


def check_peers(own: tuple[str, str], others: list[ReplicaRow]) -> None:
    """Refuse to join replicas that sign sessions with another key or keep boards elsewhere."""
    key, location = own
    for other in others:
        if other.fingerprint != key:
            raise ConfigError(
                f"the replica {other.name!r} signs sessions with another secret key; set the "
                "same TBHUB_SECRET_KEY on every replica"
            )
        if other.location != location:
            raise ConfigError(
                f"the replica {other.name!r} keeps its boards elsewhere, so neither could adopt "
                "the other's boards; with the local backend run every replica on one host "
                "with the same TBHUB_BOARD_STATE_DIR, with containers give every replica the "
                "same TBHUB_BOARD_BACKEND and TBHUB_INSTALLATION_ID"
            )


class Replica:
    def __init__(
        self,
        *,
        duties: Duties,
        lock: LeaderLock | None,
        identity: tuple[str, str] = ("", ""),
        factory: sessionmaker[Session],
        tracker: AccessTracker[BoardRef],
        metrics: SupervisorMetrics,
        retry: float = 1.0,
        flush_every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`identity`: (secret key fingerprint, board location) this replica announces."""
        self.duties = duties
        self.lock = lock
        self.identity = identity
        self.factory = factory
        self.tracker = tracker
        self.metrics = metrics
        self.retry = retry
        self.flush_every = flush_every
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._confirmed_at = float("-inf")
        self._flushed_at = clock()
        self._connection_failed = False

    @property
    def leading(self) -> bool:
        return self.metrics.leader

    def may_act(self) -> bool:
        """Leader, with the lock proved held within LEASE seconds (always, on SQLite)."""
        if self.lock is None:
            return self.leading
        return self.leading and self.clock() - self._confirmed_at < LEASE

    def wake(self) -> None:
        """Someone waits for a board: wake the supervisor, here or on the leader."""
        if self.leading or self.lock is None:
            self.duties.wake()
            return
        try:
            with transaction(self.factory) as session:
                notify_wake(session)
        except SQLAlchemyError as exc:  # the leader's timer picks the board up anyway
            log.warning("could not wake the leader's supervisor: %s", exc)

    # -- lifecycle ---------------------------------------------------------------------------

    def join(self) -> None:
        """Connect, and refuse (ConfigError) to join replicas this one disagrees with."""
        if self.lock is not None:
            self.lock.connect()
            check_peers(self.identity, self.lock.others())

    def start(self) -> None:
        """Try for the lock once before serving, then keep at it in a thread."""
        if self.lock is None:
            self._become_leader("the only server on this database (SQLite)")
            return
        if not self.lock.connected:
            self.join()
        self._try_for_lock()
        if not self.leading:
            log.info("standby replica: another replica runs the supervisor")
        self._thread = threading.Thread(target=self._run, name="tbhub-replica", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the boards only if no other replica is there to adopt them; then let go."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.leading:
            others = self._others_or_none()
            if others:
                log.info("handing the supervisor over to the other replicas; boards keep running")
            self._end_term(stop_boards=not others)
        elif self._last_out():
            # The leader handed its boards over to this standby and left before this one took
            # the lock: nobody is left to adopt them.
            log.info("the last replica is leaving and no leader is left: stopping the boards")
            self.duties.stop_boards()
        if self.lock is not None:
            self.lock.close()

    def _last_out(self) -> bool:
        """A standby leaving that finds the leader lock free and no other replica. A leader
        that has just left may hold its locks a moment longer (its session ends after its
        connection closed), so the lock is tried for up to LAST_OUT_WAIT seconds."""
        import psycopg  # PostgreSQL alone runs this (core/leader_lock.py)

        if self.lock is None or not self.lock.connected:
            return False
        deadline = time.monotonic() + LAST_OUT_WAIT
        try:
            while not self.lock.try_acquire():
                if time.monotonic() >= deadline:
                    return False  # a leader is there: it keeps the boards
                time.sleep(0.05)
            return not self.lock.others()
        except psycopg.Error:
            return False

    # -- the lock thread ---------------------------------------------------------------------

    def _run(self) -> None:
        import psycopg  # PostgreSQL alone runs this (core/leader_lock.py)

        assert self.lock is not None
        while not self._stop.is_set():
            try:
                if not self.lock.connected:
                    self.lock.connect()
                if self.leading:
                    self._heartbeat()
                    continue
                self._try_for_lock()
                if self.leading:
                    continue
                self._flush_accesses()
            except psycopg.Error as exc:
                self.lock.close()
                if self.leading:
                    log.error("lost the database connection that holds the leader lock (%s); "
                              "stopping the supervisor", exc)  # fmt: skip
                    self._end_term(stop_boards=False)
                elif not self._connection_failed:
                    log.warning("cannot reach the database for the leader lock (%s); "
                                "retrying", exc)  # fmt: skip
                self._connection_failed = True
            except Exception:  # the thread must outlive a bad pass; the next one retries
                log.exception("leader lock pass failed")
            self._stop.wait(self.retry)

    def _heartbeat(self) -> None:
        assert self.lock is not None
        sent = self.clock()
        self.lock.confirm()
        self._confirmed_at = sent
        self._connection_failed = False
        if self.lock.wait_for_wake(HEARTBEAT):
            self.duties.wake()

    def _try_for_lock(self) -> None:
        assert self.lock is not None
        sent = self.clock()
        if self.lock.try_acquire():
            self._confirmed_at = sent
            self._become_leader("took the leader lock")
        self._connection_failed = False

    def _become_leader(self, why: str) -> None:
        log.info("this replica is now the supervisor leader (%s)", why)
        self.metrics.leader = True
        self.metrics.leader_changes += 1
        self.duties.start()

    def _end_term(self, *, stop_boards: bool) -> None:
        self.metrics.leader = False
        self.metrics.leader_changes += 1
        self.duties.stop(stop_boards=stop_boards)
        log.info("this replica no longer runs the supervisor")

    def _others_or_none(self) -> list[ReplicaRow]:
        """The other replicas; none when there is no lock or it cannot tell."""
        import psycopg  # PostgreSQL alone runs this (core/leader_lock.py)

        if self.lock is None or not self.lock.connected:
            return []
        try:
            return self.lock.others()
        except psycopg.Error:
            return []

    def _flush_accesses(self) -> None:
        """On a standby, write the board accesses its auth hook recorded (the idle culler on
        the leader reads them), every `flush_every` seconds."""
        if self.clock() - self._flushed_at < self.flush_every:
            return
        self._flushed_at = self.clock()
        write_accesses(self.factory, self.tracker)


def write_accesses(factory: sessionmaker[Session], tracker: AccessTracker[BoardRef]) -> None:
    """Write the board accesses a process that does not lead recorded (a standby, an API
    worker): the idle culler on the leader reads them."""
    pending = tracker.drain()
    # One row a transaction: a transaction holding one board row while it waits for
    # another deadlocked with the leader's reconcile pass, which updates many.
    failed: dict[BoardRef, datetime] = {}
    error: SQLAlchemyError | None = None
    for board, at in pending.items():
        try:
            with transaction(factory) as session:
                flush_access(session, {board: at})
        except SQLAlchemyError as exc:
            failed[board] = at
            error = exc
    if failed:
        tracker.restore(failed)
        log.warning("could not record %d board accesses: %s", len(failed), error)
