"""The supervisor's two database steps: read what should run, write what was seen and decided.

Every pending decision the plan makes (a drain, a memory backoff, an eviction) is written
here with its time, so a restarted supervisor picks it up and nothing waits in memory only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tbhub.core.errors import StorageUnavailable, UnsafePath
from tbhub.core.fstype import is_network_filesystem, network_mounts_below
from tbhub.core.models import (
    Board,
    BoardSettings,
    BoardState,
    CompareBoard,
    CompareRun,
    DesiredState,
    ObservedState,
    Project,
    RetentionState,
    Run,
)
from tbhub.core.names import is_compare_slug
from tbhub.domain import audit
from tbhub.domain.boards import BoardRef, cull_idle_boards, flush_access
from tbhub.domain.views import view_runs, views_by_board
from tbhub.storage.compare_view import COMPARE_DIR_NAME, ViewRun
from tbhub.storage.paths import project_dir, project_path
from tbhub.storage.reach import within
from tbhub.supervisor.plan import BoardSpec, Desired, Drain, Plan, board_prefix

log = logging.getLogger("tbhub.supervisor")

MAX_RESTART_BACKOFF = 300.0


def restart_backoff(failures: int) -> float:
    """Seconds before the next start after `failures` crashes in a row: 1, 2, 4 ... 300."""
    return float(min(2 ** max(failures - 1, 0), MAX_RESTART_BACKOFF))


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _at(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


# Seconds a pass waits for a project's directory before calling its storage unavailable.
STORAGE_CHECK_WAIT = 2.0


def board_spec(
    project: str,
    storage_root: str,
    settings: BoardSettings | None = None,
    *,
    check: bool = True,
    bounded: bool = True,
) -> BoardSpec:
    """The board's spec. `check`: the project directory is opened by the one rule
    (UnsafePath); `bounded` (it is on a network filesystem): waiting at most
    STORAGE_CHECK_WAIT (StorageUnavailable), as a network mount that hangs must not hold
    the pass, nor every other project's board, with it."""
    root = Path(storage_root)
    if check and bounded:
        logdir = within(project, lambda: project_dir(root, project),
                        timeout=STORAGE_CHECK_WAIT, max_waiting=1)  # fmt: skip
    elif check:
        logdir = project_dir(root, project)
    else:
        logdir = project_path(root, project)
    spec = BoardSpec(project=project, logdir=str(logdir), path_prefix=board_prefix(project))
    if settings is None:
        return spec
    return BoardSpec(
        project=spec.project,
        logdir=spec.logdir,
        path_prefix=spec.path_prefix,
        reload_interval=settings.reload_interval or spec.reload_interval,
        samples_per_plugin=settings.samples_per_plugin or "",
        plugins=tuple(sorted(settings.plugins or ())),
    )


def network_project_dirs(root: Path) -> Callable[[str], bool]:
    """Whether a project's directory is on a network filesystem (the root's, or a mount of
    its own): from the mount table, read once a pass. Local ones are opened directly."""
    if is_network_filesystem(root):
        return lambda _name: True
    mounts = {mount.name for mount in network_mounts_below(root) if mount.parent == root.resolve()}
    return lambda name: name in mounts


def compare_spec(slug: str, compare_root: str) -> BoardSpec:
    """A compare board reads its view of hard links (storage/compare_view.py)."""
    return BoardSpec(project=slug, logdir=str(Path(compare_root) / slug),
                     path_prefix=board_prefix(slug))  # fmt: skip


@dataclass(frozen=True)
class Limits:
    memory_limit: int | None  # the global default; a project may override it
    # Containerised boards: the cgroup limit as a multiple of the board's memory limit
    # (BoardSpec.memory_limit). None: the backend enforces none (subprocess boards).
    cgroup_ratio: float | None = None

    def cgroup_bytes(self, memory_limit: int | None) -> int | None:
        if not self.cgroup_ratio or not memory_limit:
            return None
        return int(memory_limit * self.cgroup_ratio)


@dataclass(frozen=True)
class DesiredRead:
    desired: dict[str, Desired]
    # Boards not wanted and already recorded as stopped: a pass has nothing to write there.
    settled: frozenset[str]
    # The runs each wanted compare board shows, by its slug.
    views: dict[str, tuple[ViewRun, ...]] = field(default_factory=dict)


# Only these columns: loading 1,000 Board objects per pass would cost more than the rest.
STATE_COLUMNS = (
    "desired_state", "observed_state", "upstream", "retry_at", "failures", "last_access_at",
    "desired_at", "instance_id", "draining_instance_id", "draining_since", "memory_backoffs",
    "memory_retry_at", "pss_bytes", "restart_requested_at",
)  # fmt: skip


def _state_columns(model: type[BoardState]) -> list[Any]:
    return [getattr(model, name) for name in STATE_COLUMNS]


def read_desired(
    session: Session,
    *,
    accesses: Mapping[BoardRef, datetime],
    now: datetime,
    idle_timeout: float,
    storage_root: str,
    limits: Limits,
    compare_root: str | None = None,
) -> DesiredRead:
    """Flush recorded accesses, stop idle boards, and read what every board should be:
    each project's, and each compare board's (with the runs its view shows)."""
    flush_access(session, dict(accesses))
    for target in cull_idle_boards(session, now=now, idle_timeout=idle_timeout):
        audit.record(session, actor="supervisor", action="board.idle_stop", target=target)
    rows = session.execute(
        select(Project.name, BoardSettings, *_state_columns(Board))
        .join(Board, Board.project_id == Project.id)
        .outerjoin(BoardSettings, BoardSettings.project_id == Project.id)
    ).all()
    compares = session.execute(select(CompareBoard.slug, *_state_columns(CompareBoard))).all()
    compare_root = compare_root or str(Path(storage_root) / COMPARE_DIR_NAME)
    desired: dict[str, _Want] = {}
    on_network = network_project_dirs(Path(storage_root))
    for name, settings, *columns in rows:
        spec = partial(board_spec, name, storage_root, settings, bounded=on_network(name))
        try:
            want = _desired(name, _BoardColumns(*columns), settings, limits, spec)
        except UnsafePath as exc:
            # The project directory breaks storage/paths.py's rule: no board (one serving
            # it is stopped), and the board shows as failed with the reason.
            log.error("not serving project %s: %s", name, exc.message)
            refused = BoardSpec(name, str(project_path(Path(storage_root), name)),
                                board_prefix(name))  # fmt: skip
            want = _Want(Desired(spec=refused, running=True, refusal=exc.message))
        except StorageUnavailable as exc:
            log.warning("board of project %s degraded: %s", name, exc.message)
            unchecked = partial(board_spec, name, storage_root, settings, check=False)
            want = _desired(name, _BoardColumns(*columns), settings, limits, unchecked)
            want = replace(want, desired=replace(want.desired, storage_unavailable=exc.message))
        desired[name] = want
    for slug, *columns in compares:
        spec = partial(compare_spec, slug, compare_root)
        desired[slug] = _desired(slug, _BoardColumns(*columns), None, limits, spec)
    settled = {name for name, want in desired.items() if want.settled}
    wanted = [slug for slug, *_ in compares if desired[slug].running]
    return DesiredRead(
        desired={name: want.desired for name, want in desired.items()},
        settled=frozenset(settled),
        views=_view_runs(session, wanted),
    )


@dataclass(frozen=True)
class _Want:
    desired: Desired
    # Not wanted and already recorded as stopped: a pass has nothing to write there.
    settled: bool = False

    @property
    def running(self) -> bool:
        return self.desired.running


def _desired(
    name: str,
    board: _BoardColumns,
    settings: BoardSettings | None,
    limits: Limits,
    spec: Callable[[], BoardSpec],
) -> _Want:
    if board.desired_state != DesiredState.running:
        # plan() reads no spec of a board that should not run: skip resolving its path.
        stopped = Desired(
            spec=BoardSpec(project=name, logdir="", path_prefix=board_prefix(name)),
            running=False,
            draining=_drain(board),
        )
        idle = board.observed_state == ObservedState.stopped and board.upstream is None
        return _Want(stopped, settled=idle)
    own = settings.memory_limit if settings and settings.memory_limit is not None else None
    limit = (limits.memory_limit if own is None else own) or None
    board_spec = spec()
    if (hard := limits.cgroup_bytes(limit)) is not None:
        board_spec = replace(board_spec, memory_limit=hard)
    return _Want(
        Desired(
            spec=board_spec,
            running=True,
            retry_at=_ts(board.retry_at),
            failures=board.failures,
            memory_limit=limit,
            pinned=bool(settings and settings.pinned),
            last_access=_ts(board.last_access_at or board.desired_at),
            serving=board.instance_id,
            draining=_drain(board),
            memory_backoffs=board.memory_backoffs,
            memory_retry_at=_ts(board.memory_retry_at),
            last_pss=board.pss_bytes,
            restart_after=_ts(board.restart_requested_at),
        )
    )


def _view_runs(session: Session, slugs: list[str]) -> dict[str, tuple[ViewRun, ...]]:
    """The runs each of these compare boards shows: those still present on the storage (a
    saved view's: those its filter matches, domain/views.py)."""
    views: dict[str, list[ViewRun]] = {slug: [] for slug in slugs}
    if not slugs:
        return {}
    # A saved view's board follows the registry: its runs are what its filter matches now.
    saved = views_by_board(session, slugs)
    for slug, view in saved.items():
        views[slug] = [ViewRun(project, path) for project, path in view_runs(session, view)]
    slugs = [slug for slug in slugs if slug not in saved]
    rows = session.execute(
        select(CompareBoard.slug, Project.name, Run.path)
        .join(CompareRun, CompareRun.compare_id == CompareBoard.id)
        .join(Run, Run.id == CompareRun.run_id)
        .join(Project, Project.id == Run.project_id)
        .where(CompareBoard.slug.in_(slugs), Run.retention_state == RetentionState.present)
        .order_by(CompareBoard.slug, CompareRun.position)
    ).all()
    for slug, project, path in rows:
        views[slug].append(ViewRun(project, path))
    return {slug: tuple(runs) for slug, runs in views.items()}


@dataclass(frozen=True)
class _BoardColumns:
    desired_state: DesiredState
    observed_state: ObservedState
    upstream: str | None
    retry_at: datetime | None
    failures: int
    last_access_at: datetime | None
    desired_at: datetime | None
    instance_id: str | None
    draining_instance_id: str | None
    draining_since: datetime | None
    memory_backoffs: int
    memory_retry_at: datetime | None
    pss_bytes: int | None
    restart_requested_at: datetime | None


def _drain(board: _BoardColumns) -> Drain | None:
    if board.draining_instance_id and board.draining_since is not None:
        return Drain(board.draining_instance_id, board.draining_since.timestamp())
    return None


def write_ready(
    session: Session, board: str, *, instance_id: str, upstream: str, now: datetime
) -> bool:
    """Record a board that was starting as ready at `upstream`, the moment its probe answers,
    as write_observed would (the pass that follows writes the same and the rest). Only a row
    still wanted and observed starting; True if written."""
    values = {
        "observed_state": ObservedState.ready, "upstream": upstream, "instance_id": instance_id,
        "observed_at": now, "status_note": None, "swapping": False, "failures": 0,
        "retry_at": None,
    }  # fmt: skip
    if is_compare_slug(board):
        rows = update(CompareBoard).where(CompareBoard.slug == board)
        model: type[BoardState] = CompareBoard
    else:
        project = select(Project.id).where(Project.name == board).scalar_subquery()
        rows, model = update(Board).where(Board.project_id == project), Board
    written = session.execute(
        rows.where(model.desired_state == DesiredState.running,
                   model.observed_state == ObservedState.starting).values(**values)
    )  # fmt: skip
    return bool(getattr(written, "rowcount", 0))


def write_observed(
    session: Session,
    result: Plan,
    *,
    errors: Mapping[str, str],
    restarts: Mapping[str, str],
    pss: Mapping[str, int],
    now: datetime,
    settled: frozenset[str] = frozenset(),
    plugin_errors: Mapping[str, list[dict[str, str]]] | None = None,
) -> None:
    """Record this pass: observed state, drains, backoffs, evictions, restarts, failures.

    Boards in `settled` that stay stopped are not even loaded."""
    failed = result.failed | set(errors)
    touched = {
        n for n, seen in result.observed.items() if n not in settled or seen.state != "stopped"
    }
    touched |= failed | set(result.evicted) | set(result.drains) | set(result.memory_backoff)
    plugin_errors = plugin_errors or {}
    touched |= set(restarts) | set(pss) | set(plugin_errors)
    if not touched:
        return
    names = sorted(touched)
    rows: list[tuple[str, Board | CompareBoard]] = [
        (name, board)
        for query in (
            select(Project.name, Board)
            .join(Board, Board.project_id == Project.id)
            .where(Project.name.in_(names)),
            select(CompareBoard.slug, CompareBoard).where(CompareBoard.slug.in_(names)),
        )
        for name, board in session.execute(query)
    ]
    for name, board in rows:
        if name in result.evicted:
            board.desired_state, board.desired_at = DesiredState.stopped, now
            audit.record(session, actor="supervisor", action="board.evict", target=name)
        if name in result.drains:
            draining = result.drains[name]
            board.draining_instance_id = draining
            board.draining_since = now if draining is not None else None
        if name in result.memory_backoff:
            backoff = result.memory_backoff[name]
            board.memory_backoffs, board.memory_retry_at = backoff.level, _at(backoff.retry_at)
        if name in restarts:
            reason = restarts[name]
            counts = dict(board.restarts or {})
            counts[reason] = counts.get(reason, 0) + 1
            board.restarts = counts
            audit.record(
                session, actor="supervisor", action="board.restart", target=name, reason=reason
            )
        if name in pss:
            board.pss_bytes = pss[name]
        if name in plugin_errors:  # a new instance became ready: its word replaces the old
            board.plugin_errors = plugin_errors[name]
        seen = result.observed.get(name)
        if seen is None:
            continue
        state = ObservedState(seen.state)
        if (board.observed_state, board.upstream) != (state, seen.upstream):
            board.observed_at = now
        board.observed_state = state
        board.upstream = seen.upstream
        board.instance_id = seen.instance_id
        board.status_note = seen.note
        board.swapping = seen.swapping
        error = seen.error or errors.get(name)
        if error is not None:
            board.last_error = error[-4000:]
        if name in failed:
            board.failures += 1
            board.retry_at = now + timedelta(seconds=restart_backoff(board.failures))
            log.warning("board %s failed %d time(s) in a row", name, board.failures)
        elif state == ObservedState.ready:
            board.failures, board.retry_at = 0, None
