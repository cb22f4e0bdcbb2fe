"""Per-project board settings and operator requests (restart, stop, pin): service functions.

They only write desired state; the supervisor's next pass acts on it (DESIGN.md, decision 1).
A setting that shapes the board process (reload interval, samples per plugin, plugins)
changes the spec fingerprint, so the board is replaced blue/green with reason `spec`. The
memory limit, the pin and the dashboards restricted for viewers or share links (enforced by
the auth hook: domain/dashboards.py) apply to the running board as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.core.errors import InvalidInput
from tbhub.core.models import (
    Board,
    BoardSettings,
    BoardState,
    CompareBoard,
    DesiredState,
    ObservedState,
    Project,
)
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.domain import audit
from tbhub.domain.dashboards import DEFAULT_AUDIENCE, check_restriction
from tbhub.domain.projects import get_project
from tbhub.supervisor.board_process import (
    CONFINED_PLUGINS,
    OFF_BY_DEFAULT_PLUGINS,
    landlock_abi,
)
from tbhub.supervisor.budget import starts_beside
from tbhub.supervisor.metrics import BoardRow
from tbhub.supervisor.model import BOARD_ESTIMATE
from tbhub.supervisor.plugin_catalog import CATALOG

MAX_RELOAD_INTERVAL = 86_400
MAX_MEMORY_LIMIT = 2**50  # 1 PiB: more than any host, and well inside BIGINT
SAMPLES_PER_PLUGIN = re.compile(r"^[a-z0-9_]{1,64}=[0-9]{1,9}(,[a-z0-9_]{1,64}=[0-9]{1,9}){0,15}$")


class Unset:
    """A field the caller left out: it keeps its value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


@dataclass(frozen=True)
class SettingsChange:
    """What to change; UNSET keeps a field, None goes back to the global default."""

    reload_interval: int | None = UNSET
    samples_per_plugin: str | None = UNSET
    memory_limit: int | None = UNSET
    pinned: bool = UNSET
    plugins: list[str] = UNSET
    restricted_dashboards: list[str] = UNSET  # [] lifts the restriction
    restricted_audience: str | None = UNSET  # viewers, share_links or both (None: both)

    def validate(self, toggleable: Mapping[str, str] = OFF_BY_DEFAULT_PLUGINS) -> None:
        """Check every given field; `toggleable`: the plugins a project may turn on."""
        if _given(self.reload_interval) and self.reload_interval is not None:
            _check_int("reload_interval", self.reload_interval, 1, MAX_RELOAD_INTERVAL)
        if _given(self.memory_limit) and self.memory_limit is not None:
            _check_int("memory_limit", self.memory_limit, 0, MAX_MEMORY_LIMIT)
        samples = self.samples_per_plugin
        if _given(samples) and samples is not None and not SAMPLES_PER_PLUGIN.fullmatch(samples):
            raise InvalidInput(
                f"samples_per_plugin {samples[:80]!r} is not of the form "
                "plugin=N[,plugin=N...], e.g. 'scalars=500,images=0'"
            )
        if _given(self.pinned) and not isinstance(self.pinned, bool):
            raise InvalidInput("pinned must be true or false")
        if _given(self.plugins):
            unknown = sorted(set(self.plugins) - set(toggleable))
            if unknown:
                raise InvalidInput(
                    f"unknown plugin(s) {', '.join(unknown)[:200]}; plugins a project can turn "
                    f"on: {', '.join(sorted(toggleable))}"
                )
        dashboards = self.restricted_dashboards if _given(self.restricted_dashboards) else ()
        audience = self.restricted_audience if _given(self.restricted_audience) else None
        check_restriction(dashboards, audience)


def toggleable_plugins(settings: Settings) -> dict[str, str]:
    """The plugins a project turns on and off per board, each with a line on what it is and
    why it is off by default: the bundled ones that are off (the projector) and the extra
    plugins the operator installed (TBHUB_BOARD_PLUGINS, `tbhub admin plugins install`)."""
    extras = {
        name: f"extra plugin from {package}, installed by the operator; off until a project "
        "turns it on"
        for name, package in CATALOG.extra_plugins(str(settings.board_plugin_dir)).items()
    }
    return {**extras, **OFF_BY_DEFAULT_PLUGINS}


def _given(value: object) -> bool:
    return value is not UNSET


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}")


def _board(project: Project) -> Board:
    assert project.board is not None
    return project.board


def describe_board(session: Session, project: Project, settings: Settings) -> dict[str, Any]:
    """Desired and observed state, memory, restarts and settings of one board."""
    return _describe(project.name, _board(project), session.get(BoardSettings, project.id),
                     settings)  # fmt: skip


def describe_boards(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """describe_board() of every project's board, by project name, then every compare board
    (kind `compare`, named by its slug: it uses memory like any board)."""
    rows = session.execute(
        select(Project.name, Board, BoardSettings)
        .join(Board, Board.project_id == Project.id)
        .outerjoin(BoardSettings, BoardSettings.project_id == Project.id)
        .order_by(Project.name)
    ).all()
    compares = session.scalars(select(CompareBoard).order_by(CompareBoard.slug))
    return [
        *(_describe(name, board, own, settings) for name, board, own in rows),
        *(_describe(c.slug, c, None, settings, kind="compare") for c in compares),
    ]


def starts_without_eviction(session: Session, project_id: int, settings: Settings) -> bool:
    """Whether the project's board, stopped, would start within the memory budget beside
    every board that runs or starts (project, compare and view boards), with none evicted
    for it (supervisor/budget.starts_beside)."""
    running = [
        pss
        for table in (Board, CompareBoard)
        for pss in session.scalars(
            select(table.pss_bytes).where(
                table.observed_state.in_((ObservedState.ready, ObservedState.starting))
            )
        )
    ]
    own = session.get(Board, project_id)
    return starts_beside(running, own.pss_bytes if own is not None else None,
                         settings.memory_budget_bytes, BOARD_ESTIMATE)  # fmt: skip


def _describe(
    name: str, board: BoardState, own: BoardSettings | None, settings: Settings,
    kind: str = "project",
) -> dict[str, Any]:  # fmt: skip
    default_limit = int(settings.board_memory_limit) or None
    limit = own.memory_limit if own is not None and own.memory_limit is not None else None
    return {
        "project": name,  # the board's name: /boards/<project>/
        "kind": kind,
        "desired": board.desired_state.value,
        "observed": board.observed_state.value,
        "upstream": board.upstream,
        "instance": board.instance_id,
        "last_access_at": iso_utc(board.last_access_at),
        "pss_bytes": board.pss_bytes,
        "memory_limit": (default_limit if limit is None else limit) or None,
        "restarts": dict(board.restarts or {}),
        "failures": board.failures,
        "retry_at": iso_utc(board.retry_at),
        "status_note": board.status_note,
        "last_error": board.last_error,
        "plugin_errors": list(board.plugin_errors or []),
        "settings": settings_dict(own),
    }


def board_rows(session: Session, settings: Settings) -> list[BoardRow]:
    """Every board, for /metrics, in one query."""
    return [
        BoardRow(project=row["project"], observed=row["observed"], pss_bytes=row["pss_bytes"],
                 memory_limit=row["memory_limit"], restarts=row["restarts"])
        for row in describe_boards(session, settings)
    ]  # fmt: skip


def settings_dict(own: BoardSettings | None) -> dict[str, Any]:
    """The project's own settings; null fields inherit the global default."""
    return {
        "reload_interval": own.reload_interval if own else None,
        "samples_per_plugin": own.samples_per_plugin if own else None,
        "memory_limit": own.memory_limit if own else None,
        "pinned": bool(own and own.pinned),
        "plugins": sorted(own.plugins or []) if own else [],
        "restricted_dashboards": sorted(own.restricted_dashboards or []) if own else [],
        "restricted_audience": (own.restricted_audience if own else None) or DEFAULT_AUDIENCE,
    }


def check_confinable(plugins: object, backend: str) -> None:
    """Refuse a plugin that boards load only confined (the projector) where they cannot be:
    a board process of this host whose kernel has no Landlock. Containers see their project
    alone."""
    wanted = sorted(set(plugins) & CONFINED_PLUGINS) if isinstance(plugins, list | tuple) else []
    if wanted and backend == "subprocess" and landlock_abi() == 0:
        raise InvalidInput(
            f"{', '.join(wanted)} cannot be turned on here: boards load it only when they can "
            "be kept from reading outside their project, and this host's kernel has no "
            "Landlock (Linux 5.13+ with landlock in CONFIG_LSM); run boards in containers "
            "(TBHUB_BOARD_BACKEND=docker) or leave it off"
        )


def update_settings(
    session: Session,
    *,
    project: str,
    change: SettingsChange,
    actor: str,
    now: datetime,
    backend: str,
    toggleable: Mapping[str, str] = OFF_BY_DEFAULT_PLUGINS,
) -> dict[str, Any]:
    """Change a project's board settings; `backend` (TBHUB_BOARD_BACKEND) decides whether
    the plugins that need confinement can be had here, `toggleable` (toggleable_plugins())
    which plugins a project may turn on."""
    change.validate(toggleable)
    check_confinable(change.plugins, backend)
    row = get_project(session, name=project)
    own = session.get(BoardSettings, row.id)
    if own is None:
        own = BoardSettings(project_id=row.id, plugins=[], pinned=False, updated_by=actor,
                            restricted_dashboards=[])  # fmt: skip
        session.add(own)
    fields = {k: v for k, v in change.__dict__.items() if _given(v)}
    for name, value in fields.items():
        listed = name in ("plugins", "restricted_dashboards")
        setattr(own, name, sorted(set(value)) if listed else value)
    own.updated_at, own.updated_by = now, actor
    audit.record(
        session, actor=actor, action="board.settings", target=project,
        **{k: v for k, v in fields.items()},
    )  # fmt: skip
    session.flush()
    return settings_dict(own)


def request_restart(session: Session, *, project: str, actor: str, now: datetime) -> Board:
    """Replace the board blue/green (reason `admin`); start it if it was not running."""
    board = _board(get_project(session, name=project))
    board.restart_requested_at = now
    if board.desired_state != DesiredState.running:
        board.desired_state, board.desired_at = DesiredState.running, now
    board.failures, board.retry_at, board.memory_backoffs, board.memory_retry_at = 0, None, 0, None
    audit.record(session, actor=actor, action="board.restart_request", target=project)
    return board


def request_heal(session: Session, *, project: str, why: str, now: datetime) -> bool:
    """Replace a running board blue/green because its data changed under it in a way it
    cannot follow (an event file rewritten in place: storage/event_health.py). A board that
    does not run is left alone: its next start reads the files as they are."""
    board = _board(get_project(session, name=project))
    if board.desired_state != DesiredState.running:
        return False
    board.restart_requested_at = now
    audit.record(session, actor="watcher", action="board.heal", target=project, why=why)
    return True


def request_stop(session: Session, *, project: str, actor: str, now: datetime) -> Board:
    board = _board(get_project(session, name=project))
    board.desired_state, board.desired_at = DesiredState.stopped, now
    audit.record(session, actor=actor, action="board.stop_request", target=project)
    return board
