"""Desired state of boards, written by the API, the auth hook and the idle culler.

Only the supervisor starts or stops processes; everything here just records wishes and
answers "where is this board?" from a short-lived snapshot, so the auth hook's hot path
does not query the database on every request (DESIGN.md, decisions 1 and 4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from tbhub.db import transaction
from tbhub.models import Board, BoardSettings, DesiredState, ObservedState

# The hook's board snapshot is at most this old (BoardDirectory's ttl).
SNAPSHOT_TTL = 1.0


def upstream_hold_seconds(auth_cache_seconds: float) -> float:
    """After the upstream of a board changes, how long requests may still be sent to the old
    one: the hook's snapshot age, nginx's cached "let in" answer, and a second for a request
    that read the answer just before it expired."""
    return SNAPSHOT_TTL + auth_cache_seconds + 1.0


@dataclass(frozen=True)
class BoardView:
    project_id: int
    desired: DesiredState
    observed: ObservedState
    upstream: str | None
    failures: int
    note: str | None = None
    # A replacement is on its way or the old board drains: nginx should not cache the
    # upstream, so readers move to the new board as soon as the directory does.
    swapping: bool = False

    @property
    def no_capacity(self) -> bool:
        return self.observed == ObservedState.no_capacity

    @property
    def serving(self) -> bool:
        return self.observed == ObservedState.ready and self.upstream is not None


class BoardDirectory:
    """A snapshot of every board row, reloaded with one query when older than `ttl`."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = SNAPSHOT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._views: dict[int, BoardView] = {}
        self._loaded_at = float("-inf")

    def get(self, project_id: int) -> BoardView | None:
        with self._lock:
            if self._clock() - self._loaded_at > self._ttl:
                self._reload()
            return self._views.get(project_id)

    def _reload(self) -> None:
        with self._factory() as session:
            rows = session.execute(
                select(
                    Board.project_id,
                    Board.desired_state,
                    Board.observed_state,
                    Board.upstream,
                    Board.failures,
                    Board.status_note,
                    Board.swapping,
                )
            ).all()
        self._views = {row[0]: BoardView(*row) for row in rows}
        self._loaded_at = self._clock()

    def want_running(self, project_id: int) -> bool:
        """Record that someone waits for this board. True if that changed the desired state."""
        view = self.get(project_id)
        if view is not None and view.desired == DesiredState.running:
            # Someone waits: read the board again on the next request, so that the switch
            # to a ready board is not held back by the snapshot's age.
            with self._lock:
                self._loaded_at = float("-inf")
            return False
        with transaction(self._factory) as session:
            changed = request_board(session, project_id=project_id, now=datetime.now(UTC))
        with self._lock:
            self._loaded_at = float("-inf")
        return changed


class AccessTracker:
    """Last access per project, kept in memory and flushed to the database in batches."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[int, datetime] = {}

    def touch(self, project_id: int) -> None:
        now = self._clock()
        with self._lock:
            self._pending[project_id] = now

    def drain(self) -> dict[int, datetime]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def restore(self, pending: dict[int, datetime]) -> None:
        """Put back accesses that could not be written, keeping the later of two times."""
        with self._lock:
            for project_id, at in pending.items():
                if project_id not in self._pending or self._pending[project_id] < at:
                    self._pending[project_id] = at


def request_board(session: Session, *, project_id: int, now: datetime) -> bool:
    board = session.get(Board, project_id)
    if board is None:
        return False
    board.last_access_at = now
    if board.desired_state == DesiredState.running:
        return False
    board.desired_state = DesiredState.running
    board.desired_at = now
    board.last_error = None
    return True


def flush_access(session: Session, accesses: dict[int, datetime]) -> None:
    for project_id, at in accesses.items():
        session.execute(
            update(Board)
            .where(Board.project_id == project_id)
            .where((Board.last_access_at.is_(None)) | (Board.last_access_at < at))
            .values(last_access_at=at)
        )


def cull_idle_boards(session: Session, *, now: datetime, idle_timeout: float) -> list[int]:
    """Mark boards nobody has used for `idle_timeout` seconds as not wanted; pinned ones stay."""
    cutoff = now - timedelta(seconds=idle_timeout)
    idle = []
    pinned = select(BoardSettings.project_id).where(BoardSettings.pinned.is_(True))
    running = select(Board).where(
        Board.desired_state == DesiredState.running, Board.project_id.not_in(pinned)
    )
    for board in session.scalars(running):
        last_seen = max(t for t in (board.last_access_at, board.desired_at) if t is not None)
        if last_seen < cutoff:
            board.desired_state = DesiredState.stopped
            board.desired_at = now
            idle.append(board.project_id)
    return idle
