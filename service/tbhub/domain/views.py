"""Saved views: a filter over a project's runs with a board of its own over exactly those runs.

A view is a row (`saved_views`) with a filter in the runs API's terms (status, tag, group,
text, registered since/until, hparam./metric. conditions: domain/runs.RunFilter, the one
query the project page and GET /projects/<p>/runs use) and a compare board (`board`) whose
logdir is a view of hard links (storage/compare_view.py). The board follows the registry:
the supervisor reads `view_runs` for every wanted view board on each pass and re-links the
view every SYNC_SECONDS, so a new matching run appears and a trashed run leaves.

Who may do what (table-tested in tests/api/test_views.py):
- a project's viewer lists and opens the shared views and their own, and opens the
  project's default view; its owners see every view of it;
- an editor or owner also makes views (a view is a board, so it costs memory like one);
- a view's owner, a project owner and an admin delete it.

The default view (`preset` "recent") is the project's newest RECENT_RUNS runs, its running
runs and its pinned runs (those retention keeps: `pinned_runs`); a project over
`default_view_over_runs` runs opens on it (web/views.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select, union
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, require_project
from tbhub.auth.permissions import AccessCache
from tbhub.core.bounds import RUN_GROUP_MAX, TAG_MAX
from tbhub.core.errors import AlreadyExists, Forbidden, InvalidInput, NotFound
from tbhub.core.models import (
    CompareBoard,
    PinnedRun,
    Project,
    RetentionState,
    Role,
    Run,
    RunStatus,
    SavedView,
    TokenScope,
)
from tbhub.core.timestamps import parse_moment
from tbhub.domain import audit
from tbhub.domain.run_params import MAX_FILTERS, parse_filters
from tbhub.domain.runs import RunFilter, run_query

VIEW_NAME_MAX = 64  # saved_views.name String(64)
TEXT_MAX = 200  # the free-text search, as GET /projects/<p>/runs takes it
PARAM_MAX = 400  # one hparam./metric. condition
MAX_VIEW_RUNS = 1000  # a view shows its newest matching runs, at most this many
MAX_VIEWS = 200  # per project
RECENT_RUNS = 20  # the default view's newest runs
DEFAULT_PRESET = "recent"
DEFAULT_NAME = "Recent, running and pinned"


@dataclass(frozen=True)
class ViewFilter:
    """What a view matches, as stored (`to_json`) and as the API takes it: every field
    optional, all given must hold."""

    status: tuple[RunStatus, ...] = ()
    tag: str | None = None
    group: str | None = None
    q: str | None = None
    since: str | None = None
    until: str | None = None
    params: tuple[str, ...] = ()  # hparam./metric. conditions, e.g. "hparam.lr=0.1"

    def run_filter(self) -> RunFilter:
        return RunFilter(
            status=list(self.status) or None,
            tag=self.tag,
            group=self.group,
            text=self.q,
            since=parse_moment("since", self.since),
            until=parse_moment("until", self.until),
            params=tuple(parse_filters(self.params)),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items() if v}


def _text(data: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidInput(f"filter.{key} must be text of at most {limit} characters")
    return value


def parse_view_filter(data: Any) -> ViewFilter:
    """A view's filter from JSON, checked whole (an unknown key, a bad status, time or
    condition is InvalidInput naming it), so a stored filter always runs."""
    if not isinstance(data, Mapping):
        raise InvalidInput('filter must be an object, e.g. {"status": ["running"]}')
    unknown = sorted(set(data) - set(ViewFilter.__dataclass_fields__))
    if unknown:
        raise InvalidInput(f"filter has no field {unknown[0][:40]!r}; use status, tag, group, "
                           "q, since, until or params")  # fmt: skip
    raw_status = data.get("status") or []
    raw_params = data.get("params") or []
    if not isinstance(raw_status, list) or len(raw_status) > len(RunStatus):
        raise InvalidInput(f"filter.status must be a list of at most {len(RunStatus)} of "
                           f"{', '.join(RunStatus)}")  # fmt: skip
    try:
        status = tuple(dict.fromkeys(RunStatus(s) for s in raw_status))
    except (ValueError, TypeError):
        raise InvalidInput(f"filter.status takes {', '.join(RunStatus)}") from None
    if not isinstance(raw_params, list) or len(raw_params) > MAX_FILTERS:
        raise InvalidInput(f"filter.params must be a list of at most {MAX_FILTERS} conditions "
                           "such as \"hparam.lr=0.1\"")  # fmt: skip
    if not all(isinstance(p, str) and len(p) <= PARAM_MAX for p in raw_params):
        raise InvalidInput(f"each of filter.params is a condition of at most {PARAM_MAX} "
                           "characters, such as \"metric.accuracy>=0.9\"")  # fmt: skip
    found = ViewFilter(
        status=status,
        tag=_text(data, "tag", TAG_MAX),
        group=_text(data, "group", RUN_GROUP_MAX),
        q=_text(data, "q", TEXT_MAX),
        since=_text(data, "since", 40),
        until=_text(data, "until", 40),
        params=tuple(raw_params),
    )
    found.run_filter()  # the times and conditions parse, or InvalidInput says which does not
    return found


def board_slug(view_id: int) -> str:
    """The view's board: a compare board's name (`cmp-` + 12 hex), fixed by the view's id."""
    return "cmp-" + hashlib.sha256(f"view:{view_id}".encode()).hexdigest()[:12]


def view_run_ids(session: Session, view: SavedView) -> list[int]:
    """The runs the view shows, newest first: those its filter matches that are still on
    the storage, at most MAX_VIEW_RUNS."""
    if view.preset == DEFAULT_PRESET:
        return _default_run_ids(session, view.project_id)
    query = run_query(view.project_id, parse_view_filter(view.filter).run_filter())
    ids = query.with_only_columns(Run.id).order_by(Run.id.desc()).limit(MAX_VIEW_RUNS)
    return list(session.scalars(ids))


def _default_run_ids(session: Session, project_id: int) -> list[int]:
    pinned = select(PinnedRun.run_path).where(PinnedRun.project_id == project_id)
    newest = run_query(project_id, RunFilter()).with_only_columns(Run.id)
    recent = newest.order_by(Run.id.desc()).limit(RECENT_RUNS).subquery()
    parts = union(
        select(recent.c.id),
        run_query(project_id, RunFilter(status=[RunStatus.running])).with_only_columns(Run.id),
        run_query(project_id, RunFilter()).with_only_columns(Run.id).where(Run.path.in_(pinned)),
    ).subquery()
    ids = select(parts.c.id).order_by(parts.c.id.desc()).limit(MAX_VIEW_RUNS)
    return list(session.scalars(ids))


def view_runs(session: Session, view: SavedView) -> list[tuple[str, str]]:
    """(project, run path) of each run the view shows, newest first."""
    ids = view_run_ids(session, view)
    if not ids:
        return []
    rows = session.execute(
        select(Project.name, Run.path, Run.id)
        .join(Project, Project.id == Run.project_id)
        .where(Run.id.in_(ids), Run.retention_state == RetentionState.present)
        .order_by(Run.id.desc())
    )
    return [(project, path) for project, path, _ in rows]


def views_by_board(session: Session, slugs: Sequence[str]) -> dict[str, SavedView]:
    """The views whose boards these compare boards are, by board slug."""
    if not slugs:
        return {}
    rows = session.scalars(
        select(SavedView).join(CompareBoard, CompareBoard.id == SavedView.compare_id)
        .where(CompareBoard.slug.in_(list(slugs)))
    )  # fmt: skip
    return {view.board.slug: view for view in rows}


def _visible(caller: Caller, role: Role, view: SavedView) -> bool:
    """Shared views and the default one are every reader's; a private one its owner's, and
    the project's owners' (they manage the project)."""
    return (view.shared or view.preset is not None or view.owner_id == caller.user_id
            or role is Role.owner or caller.is_admin)  # fmt: skip


def list_views(
    session: Session, *, access: AccessCache, caller: Caller, project: str
) -> list[SavedView]:
    """The views of `project` the caller may use (shared ones and their own), by name."""
    reader = require_project(access, caller, project, Role.viewer)
    rows = session.scalars(
        select(SavedView).where(SavedView.project_id == reader.project_id)
        .order_by(SavedView.preset.is_(None), SavedView.name, SavedView.id)
    )  # fmt: skip
    return [view for view in rows if _visible(caller, reader.role, view)]


def get_view(
    session: Session, *, access: AccessCache, caller: Caller, project: str, view_id: int
) -> SavedView:
    reader = require_project(access, caller, project, Role.viewer)
    view = session.get(SavedView, view_id)
    if (
        view is None
        or view.project_id != reader.project_id
        or not _visible(caller, reader.role, view)
    ):
        raise NotFound(
            f"no view {view_id} of project {project} that you can use; list them with "
            f"`tbhub views list -p {project}` or on the project's page"
        )
    return view


def _new_view(session: Session, *, caller: Caller, project_id: int, name: str,
              shared: bool, preset: str | None, flt: ViewFilter) -> SavedView:  # fmt: skip
    """Insert the view and its board (named after the view's id) in one step."""
    board = CompareBoard(slug="cmp-pending", owner_id=caller.user_id, name=name[:128])
    view = SavedView(project_id=project_id, name=name, owner_id=caller.user_id, shared=shared,
                     preset=preset, filter=flt.to_json(), board=board)  # fmt: skip
    with session.begin_nested():
        session.add(view)
        session.flush()
        board.slug = board_slug(view.id)
        session.flush()
    return view


def create_view(
    session: Session,
    *,
    access: AccessCache,
    caller: Caller,
    project: str,
    name: str,
    shared: bool,
    flt: ViewFilter,
) -> SavedView:
    """A new view of `project` (an editor's or owner's); AlreadyExists for a name taken."""
    project_id = require_project(access, caller, project, Role.editor).project_id
    name = _check_name(name)
    count = session.scalar(select(func.count()).where(SavedView.project_id == project_id))
    if (count or 0) >= MAX_VIEWS:
        raise InvalidInput(f"project {project} has {MAX_VIEWS} views, the most it may; delete "
                           "one first (`tbhub views delete`)")  # fmt: skip
    try:
        view = _new_view(session, caller=caller, project_id=project_id, name=name,
                         shared=shared, preset=None, flt=flt)  # fmt: skip
    except IntegrityError:
        raise AlreadyExists(
            f"project {project} already has a view named {name!r}; pick "
            "another name or delete that one"
        ) from None
    audit.record(session, actor=caller.name, action="view.create",
                 target=f"{project}/{view.id}", name=name, shared=shared,
                 filter=view.filter)  # fmt: skip
    return view


def default_view(
    session: Session, *, access: AccessCache, caller: Caller, project: str
) -> tuple[SavedView, bool]:
    """The project's default view (recent, running and pinned runs), made on first use, and
    whether this call made it (then its new board must reach the caches once it commits)."""
    project_id = require_project(access, caller, project, Role.viewer).project_id
    query = select(SavedView).where(SavedView.project_id == project_id,
                                    SavedView.preset == DEFAULT_PRESET)  # fmt: skip
    found = session.scalar(query)
    if found is not None:
        return found, False
    try:
        made = _new_view(session, caller=caller, project_id=project_id, name=DEFAULT_NAME,
                         shared=True, preset=DEFAULT_PRESET, flt=ViewFilter())  # fmt: skip
    except IntegrityError:  # made meanwhile by another request
        found = session.scalar(query)
        if found is None:
            raise
        return found, False
    return made, True


def delete_view(
    session: Session, *, access: AccessCache, caller: Caller, project: str, view_id: int
) -> None:
    """Delete the view and its board; the supervisor stops the board and removes its links."""
    view = get_view(session, access=access, caller=caller, project=project, view_id=view_id)
    role = require_project(access, caller, project, Role.viewer).role
    if view.owner_id != caller.user_id and role is not Role.owner and not caller.is_admin:
        raise Forbidden(f"only the view's owner or an owner of {project} may delete view "
                        f"{view_id}")  # fmt: skip
    if caller.grant is not None and caller.grant.scope == TokenScope.read:
        raise Forbidden("a read token cannot delete a view; use a write token or the web UI")
    session.delete(view.board)  # its view row goes with it (ON DELETE CASCADE)
    session.delete(view)
    audit.record(session, actor=caller.name, action="view.delete", target=f"{project}/{view_id}")


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > VIEW_NAME_MAX or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInput(f"a view's name is 1 to {VIEW_NAME_MAX} characters with no control "
                           "characters")  # fmt: skip
    return name


def count_present_runs(session: Session, project_id: int) -> int:
    query = (
        select(func.count())
        .select_from(Run)
        .where(Run.project_id == project_id, Run.retention_state == RetentionState.present)
    )
    return int(session.scalar(query) or 0)
