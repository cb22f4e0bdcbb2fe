"""GET /api/v1/boards/<project>/bar: what tbhub's bar on a board page shows.

nginx adds static/board-bar.js to every board page (nginx/tbhub.conf.j2); the script asks
this route who is reading, where tbhub's pages are (the main origin, also from a board's own
origin), and whether the project has any run yet, so an empty board says where to write runs
instead of TensorBoard's "no dashboards" text, which plugins a project turns on and off (the
projector) are off, why, and how an owner turns them on (an owner gets the page that does):
their tab is missing from the board and nothing else would say why; and which plugins failed
to load. A share link's guest never reaches it (that
cookie is sent to the board's own path only): their 401 tells the script to show "shared
view"."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tbhub.api.board_gate import Verdict, judge_user, readable_board, viewer_session
from tbhub.auth.caller import Caller, effective_role
from tbhub.auth.compare_access import board_projects
from tbhub.core.models import (
    BoardSettings,
    CompareBoard,
    CompareRun,
    Project,
    RetentionState,
    Role,
    Run,
    SavedView,
    User,
)
from tbhub.core.settings import Settings
from tbhub.domain.boards import BoardRef
from tbhub.domain.views import view_run_ids
from tbhub.http.csrf import binding_of
from tbhub.http.deps import ContextDep, ProjectInPath, SessionDep
from tbhub.storage.paths import project_path
from tbhub.supervisor.board_settings import describe_board, toggleable_plugins

router = APIRouter(prefix="/api/v1/boards", tags=["boards"])


PLUGIN_ERRORS_SHOWN = 16  # plugins that failed to load, at most, and so many characters of each
PLUGIN_ERROR_CHARS = 500


def plugins_off(
    session: Session, board: BoardRef, project: str, settings: Settings, *, owner: bool
) -> list[dict[str, Any]]:
    """The plugins a project turns on and off (`toggleable_plugins`) that this board leaves
    out: `name`, `why` it is off, `how` to turn it on, and for an owner `toggle`, the path of
    the project's board page that does (null for others: they ask an owner)."""
    if board.kind != "project":
        return []
    own = session.get(BoardSettings, board.id)
    chosen = set(own.plugins or []) if own is not None else set()
    toggle = f"/projects/{quote(project)}/board#plugins-heading"
    how = (
        "turn it on on this project's Board page, or with: tbhub admin board set {project} "
        "--plugin {name}"
        if owner
        else "a project owner turns it on: ask one"
    )
    return [
        {"name": name, "why": why, "how": how.format(project=project, name=name),
         "toggle": toggle if owner else None}
        for name, why in sorted(toggleable_plugins(settings).items())
        if name not in chosen
    ]  # fmt: skip


def plugin_errors(session: Session, board: BoardRef, settings: Settings) -> list[dict[str, str]]:
    """The plugins that failed to load on this board, as its status (describe_board) has
    them: `plugin` and `error`; none when the status has no such field."""
    project = session.get(Project, board.id) if board.kind == "project" else None
    if project is None or project.board is None:
        return []
    failed = describe_board(session, project, settings).get("plugin_errors") or []
    return [
        {"plugin": str(item.get("plugin", ""))[:PLUGIN_ERROR_CHARS],
         "error": str(item.get("error", ""))[:PLUGIN_ERROR_CHARS]}
        for item in failed[:PLUGIN_ERRORS_SHOWN]
    ]  # fmt: skip


def runs_with_files(session: Session, board: BoardRef) -> int:
    """Runs of the board (its project's, or a compare board's) that hold at least one file:
    what it can show."""
    query = (
        select(func.count())
        .select_from(Run)
        .where(Run.retention_state == RetentionState.present, Run.files > 0)
    )
    view = saved_view_of(session, board)
    if view is not None:
        query = query.where(Run.id.in_(view_run_ids(session, view)))
    elif board.kind == "compare":
        query = query.join(CompareRun, CompareRun.run_id == Run.id).where(
            CompareRun.compare_id == board.id
        )
    else:
        query = query.where(Run.project_id == board.id)
    return session.scalar(query) or 0


def saved_view_of(session: Session, board: BoardRef) -> SavedView | None:
    """The saved view whose board this is (domain/views.py), if it is one."""
    if board.kind != "compare":
        return None
    return session.scalar(select(SavedView).where(SavedView.compare_id == board.id))


def page_of(project: str, compare: CompareBoard | None, view: SavedView | None) -> str:
    """The board's page in tbhub: a view's own page, the compare boards, the project's."""
    if view is not None:
        return f"/projects/{view.project.name}/views/{view.id}"
    return "/compare" if compare is not None else f"/projects/{project}"


@router.get("/{project}/bar")
def board_bar(
    request: Request, project: ProjectInPath, context: ContextDep, session: SessionDep
) -> dict[str, Any]:
    """For the board page's bar: `user` (the signed-in member; null for a token, then
    `shared`), `kind` (project, compare or view: a saved view's board) and `title` (the
    project's name, or the compare board's or view's name, else its slug), `home` (tbhub's
    own address), `page` (for members: the path of the board's page in tbhub: the project's
    runs, the compare boards or the view's page), `whole_project` (a view's board: the board
    of its whole project),
    `csrf_token` (to sign out from the board page, on tbhub's origin only), `runs` (runs with
    files) and, for members, `logdir`, `run_command`, `plugins_off` (the plugins this board
    leaves out, each with `why`, `how` to turn it on and, for owners, `toggle`: the page that
    does) and `plugin_errors` (plugins that failed to load: `plugin`, `error`)."""
    board = readable_board(request, context, project)
    data = viewer_session(request, context, project)
    # A compare board's reader reads every project of its runs (the gate checked it).
    projects = board_projects(context.compares, project) or frozenset()
    member = (
        bool(projects)
        and data is not None
        and all(judge_user(context, data, p)[0] is Verdict.allowed for p in projects)
    )
    user = session.get(User, data.user_id) if member and data is not None else None
    # Where to write runs: a project's own directory; a compare board has none.
    writer = user is not None and board.kind == "project"
    binding = binding_of(request, context.cookies) if user is not None else None
    compare = session.get(CompareBoard, board.id) if board.kind == "compare" else None
    owner = (
        writer
        and user is not None
        and effective_role(Caller.of_user(user), context.access.lookup(user.id, project))
        is Role.owner
    )
    view = saved_view_of(session, board)
    return {
        "project": project,
        "kind": "view" if view is not None else board.kind,
        "title": (compare.name or project) if compare is not None else project,
        "user": user.name if user is not None else None,
        "shared": user is None,
        "home": context.settings.public_url.rstrip("/"),
        "page": None if user is None else page_of(project, compare, view),
        "whole_project": f"/boards/{view.project.name}/" if view is not None else None,
        "csrf_token": context.csrf.token(binding) if binding else None,
        "runs": runs_with_files(session, board),
        "logdir": str(project_path(context.settings.storage, project)) if writer else None,
        "run_command": f"tbhub run --project {project} -- python train.py" if writer else None,
        "plugins_off": []
        if user is None
        else plugins_off(session, board, project, context.settings, owner=owner),
        "plugin_errors": [] if user is None else plugin_errors(session, board, context.settings),
    }
