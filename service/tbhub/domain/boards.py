"""Desired state of boards, written by the API, the auth hook and the idle culler.

Only the supervisor starts or stops processes; everything here just records wishes and
answers "where is this board?" from a short-lived snapshot, so the auth hook's hot path
does not query the database on every request (DESIGN.md, decisions 1 and 4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, Literal, TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import (
    Board,
    BoardSettings,
    BoardState,
    CompareBoard,
    DesiredState,
    ObservedState,
)

# The hook's board snapshot is at most this old (BoardDirectory's ttl).
SNAPSHOT_TTL = 1.0


# nginx caches a "go to this board" answer this long (seconds); starting answers not at all.
AUTH_CACHE_SECONDS = 5


def auth_cache_seconds(idle_timeout: float) -> int:
    """How long nginx may reuse a "let in" answer. Cached answers hide accesses from the
    idle culler, so the cache lasts at most a quarter of the idle timeout."""
    return max(1, min(AUTH_CACHE_SECONDS, int(idle_timeout / 4)))


def upstream_hold_seconds(auth_cache_seconds: float) -> float:
    """After the upstream of a board changes, how long requests may still be sent to the old
    one: the hook's snapshot age, nginx's cached "let in" answer, and a second for a request
    that read the answer just before it expired."""
    return SNAPSHOT_TTL + auth_cache_seconds + 1.0


BoardKind = Literal["project", "compare"]


@dataclass(frozen=True, order=True)
class BoardRef:
    """Which board row: a project's board (`boards`, by project id) or a compare board
    (`compare_boards`, by its id)."""

    kind: BoardKind
    id: int

    @classmethod
    def of_project(cls, project_id: int) -> BoardRef:
        return cls("project", project_id)

    @classmethod
    def of_compare(cls, compare_id: int) -> BoardRef:
        return cls("compare", compare_id)


BoardRow = Board | CompareBoard
# Each kind of board row: its table and the column that holds the id a BoardRef names.
BOARD_TABLES: dict[BoardKind, tuple[type[BoardRow], InstrumentedAttribute[int]]] = {
    "project": (Board, Board.project_id),
    "compare": (CompareBoard, CompareBoard.id),
}


def board_row(session: Session, board: BoardRef) -> BoardRow | None:
    if board.kind == "project":
        return session.get(Board, board.id)
    return session.get(CompareBoard, board.id)


def failure_reason(last_error: str | None) -> str | None:
    """The part of a board's last error people are shown: its last line, cut at 300."""
    lines = (last_error or "").strip().splitlines()
    return lines[-1][:300] if lines else None


@dataclass(frozen=True)
class BoardView:
    desired: DesiredState
    observed: ObservedState
    upstream: str | None
    failures: int
    note: str | None = None
    # A replacement is on its way or the old board drains: nginx should not cache the
    # upstream, so readers move to the new board as soon as the directory does.
    swapping: bool = False
    last_error: str | None = None

    @property
    def no_capacity(self) -> bool:
        return self.observed == ObservedState.no_capacity

    @property
    def failed(self) -> bool:
        return self.observed == ObservedState.failed

    @property
    def reason(self) -> str | None:
        """Why the board does not serve: its standing note, else its last error's last line."""
        return self.note or failure_reason(self.last_error)

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
        self._views: dict[BoardRef, BoardView] = {}
        self._loaded_at = float("-inf")

    def get(self, board: BoardRef) -> BoardView | None:
        with self._lock:
            if self._clock() - self._loaded_at > self._ttl:
                self._reload()
            return self._views.get(board)

    def _reload(self) -> None:
        views: dict[BoardRef, BoardView] = {}
        with self._factory() as session:
            for kind, (model, key) in BOARD_TABLES.items():
                rows = session.execute(
                    select(
                        key,
                        model.desired_state,
                        model.observed_state,
                        model.upstream,
                        model.failures,
                        model.status_note,
                        model.swapping,
                        model.last_error,
                    )
                ).all()
                views.update({BoardRef(kind, row[0]): BoardView(*row[1:]) for row in rows})
        self._views = views
        self._loaded_at = self._clock()

    def invalidate(self) -> None:
        """Read every board again on the next get(): the supervisor has just written a change."""
        with self._lock:
            self._loaded_at = float("-inf")

    def want_running(self, board: BoardRef) -> bool:
        """Record that someone waits for this board. True if that changed the desired state."""
        view = self.get(board)
        if view is not None and view.desired == DesiredState.running:
            # Someone waits: read the board again on the next request, so that the switch
            # to a ready board is not held back by the snapshot's age.
            self.invalidate()
            return False
        with transaction(self._factory) as session:
            row = board_row(session, board)
            changed = row is not None and want_board(row, now=datetime.now(UTC))
        self.invalidate()
        return changed


K = TypeVar("K", bound=Hashable)


class AccessTracker(Generic[K]):
    """Last access per key (a board, a token), kept in memory and flushed in batches."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[K, datetime] = {}

    def touch(self, key: K) -> None:
        now = self._clock()
        with self._lock:
            self._pending[key] = now

    def drain(self) -> dict[K, datetime]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def restore(self, pending: dict[K, datetime]) -> None:
        """Put back accesses that could not be written, keeping the later of two times."""
        with self._lock:
            for key, at in pending.items():
                if key not in self._pending or self._pending[key] < at:
                    self._pending[key] = at


def request_board(session: Session, *, project_id: int, now: datetime) -> bool:
    board = session.get(Board, project_id)
    return board is not None and want_board(board, now=now)


def want_board(board: BoardState, *, now: datetime) -> bool:
    """Someone waits for this board: it should run. True if that changed the desired state."""
    board.last_access_at = now
    if board.desired_state == DesiredState.running:
        return False
    board.desired_state = DesiredState.running
    board.desired_at = now
    board.last_error = None
    return True


def flush_access(session: Session, accesses: dict[BoardRef, datetime]) -> None:
    for board, at in accesses.items():
        model, key = BOARD_TABLES[board.kind]
        session.execute(
            update(model)
            .where(key == board.id)
            .where((model.last_access_at.is_(None)) | (model.last_access_at < at))
            .values(last_access_at=at)
        )


def cull_idle_boards(session: Session, *, now: datetime, idle_timeout: float) -> list[str]:
    """Mark boards nobody has used for `idle_timeout` seconds as not wanted; pinned ones stay.

    Returns what the audit log names them by: a project's id, a compare board's slug."""
    cutoff = now - timedelta(seconds=idle_timeout)
    pinned = select(BoardSettings.project_id).where(BoardSettings.pinned.is_(True))
    projects = select(Board).where(
        Board.desired_state == DesiredState.running, Board.project_id.not_in(pinned)
    )
    compares = select(CompareBoard).where(CompareBoard.desired_state == DesiredState.running)
    idle = []
    for board in [*session.scalars(projects), *session.scalars(compares)]:
        last_seen = max(t for t in (board.last_access_at, board.desired_at) if t is not None)
        if last_seen < cutoff:
            board.desired_state = DesiredState.stopped
            board.desired_at = now
            idle.append(str(board.project_id) if isinstance(board, Board) else board.slug)
    return idle
