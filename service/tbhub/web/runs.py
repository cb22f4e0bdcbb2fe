"""A project's page (`/projects/<p>`): its runs table with filters, sorting and paging (the
API's filter, runs.RunFilter), a sparkline per run, pin/unpin, and runs to select for
`/compare`; a run's page (`/projects/<p>/runs/<id>`): lineage, status history, files, and
links into the board filtered to the run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess, require_project
from tbhub.core.bounds import INT32_MAX, INT64_MAX, RUN_GROUP_MAX, TAG_MAX, TOKEN_MAX, URL_PATH_MAX
from tbhub.core.errors import StorageUnavailable
from tbhub.core.models import Board, PinnedRun, RetentionState, Role, Run, RunStatus, RunTag, User
from tbhub.core.names import one_of
from tbhub.domain.overview import board_detail, board_state, run_state
from tbhub.domain.run_params import effective_params, parse_filters
from tbhub.domain.runs import SORTS, RunFilter, get_run, page_runs, run_history
from tbhub.domain.sparkline import sparkline_svg
from tbhub.health.incidents import run_filter
from tbhub.housekeeping import retention
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.storage.reach import within
from tbhub.storage.run_files import RunFile, list_run_files
from tbhub.storage.scalars import pick_curve
from tbhub.supervisor.board_assets import stamped_files
from tbhub.supervisor.board_settings import starts_without_eviction
from tbhub.supervisor.plan import board_prefix
from tbhub.web.health import run_badges, run_timeline
from tbhub.web.pages import safe_next
from tbhub.web.render import WebUser, caller_of, check_form_token, done, page
from tbhub.web.views import project_views

router = APIRouter(include_in_schema=False)

PER_PAGE = 50
KEY_COLUMNS = 3  # hyperparameters and summary metrics shown as columns (the most common)
# Board states (domain/overview.board_state) in which the project page prerenders the board
# page as it is; a stopped board only when it fits the memory budget (board_prerender).
SERVING_OR_STARTING = ("live", "restarting", "starting")
SUGGEST_FROM = 500  # the filter boxes suggest the groups and tags of this many newest runs
RunId = Annotated[int, Path(ge=1, le=INT64_MAX)]
Sort = Literal["created", "name", "status", "last_write", "size"]
Order = Literal["asc", "desc"]


def board_filter_links(project: str, run_path: str) -> dict[str, str]:
    """Links into the project's board showing only this run (and the runs below it, e.g.
    train/ and validation/): TensorBoard's time series dashboard reads the `runFilter`
    query parameter, the older scalars dashboard `regexInput` in the URL's fragment."""
    regex = run_filter(run_path)  # a JavaScript regex, as TensorBoard reads it
    base = board_prefix(project) + "/"
    return {
        "timeseries": f"{base}?{urlencode({'runFilter': regex})}#timeseries",
        "scalars": f"{base}#scalars&regexInput={quote(regex, safe='')}",
    }


@dataclass(frozen=True)
class TableQuery:
    """The project page's filters, order and page, as its URL carries them."""

    project: str
    status: str = ""
    tag: str = ""
    group: str = ""
    q: str = ""
    sort: str = "created"
    order: str = "desc"
    page: int = 1
    where: str = ""  # hparam./metric. conditions, space-separated (domain/run_params.py)

    def filter(self) -> RunFilter:
        status = [one_of(RunStatus, self.status, "status")] if self.status else None
        params = tuple(parse_filters(self.where.split()))
        return RunFilter(status=status, tag=self.tag or None, group=self.group or None,
                         text=self.q or None, params=params)  # fmt: skip

    def link(self, **changes: Any) -> str:
        """This page's URL with some values changed; a new filter or order starts at page 1."""
        if "page" not in changes:
            changes["page"] = 1
        wanted = replace(self, **changes)
        defaults = TableQuery(self.project)
        params = {
            key: getattr(wanted, key)
            for key in ("status", "tag", "group", "q", "where", "sort", "order", "page")
            if getattr(wanted, key) != getattr(defaults, key)
        }
        path = f"/projects/{quote(self.project)}"
        return f"{path}?{urlencode(params)}" if params else path

    def sort_link(self, column: str) -> str:
        """A column header's link: by that column, flipping the order when it is the current."""
        if column == self.sort:
            return self.link(sort=column, order="asc" if self.order == "desc" else "desc")
        return self.link(sort=column, order="asc" if column in ("name", "status") else "desc")

    @property
    def filtered(self) -> bool:
        return bool(self.status or self.tag or self.group or self.q or self.where)


def _common_keys(dicts: list[dict[str, Any]]) -> list[str]:
    counts = Counter(key for d in dicts for key in d)
    return [key for key, _ in counts.most_common(KEY_COLUMNS)]


def _viewer(
    context: AppContext, user: User, project: str, need: Role = Role.viewer
) -> ProjectAccess:
    return require_project(context.access, caller_of(user), project, need)


def _board(session: Session, access: ProjectAccess) -> dict[str, Any]:
    board = session.get(Board, access.project_id)
    return {"state": board_state(board), "detail": board_detail(board)}


def _suggestions(session: Session, project_id: int) -> tuple[list[str], list[str]]:
    """Groups and tags for the filter boxes, from the newest `SUGGEST_FROM` runs. Their ids
    come first and the tags by those ids: a join of all runs with all tags is a plan a
    database without statistics can turn quadratic (seconds at 10,000 runs)."""
    recent = select(Run.id, Run.group).where(
        Run.project_id == project_id, Run.retention_state == RetentionState.present
    )
    rows = session.execute(recent.order_by(Run.id.desc()).limit(SUGGEST_FROM)).all()
    groups = sorted({group for _, group in rows if group})
    tags = session.scalars(select(RunTag.tag).where(RunTag.run_id.in_([i for i, _ in rows])))
    return groups, sorted(set(tags)) if rows else []


@router.get("/projects/{project}")
def project_page(
    request: Request,
    project: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    status: Annotated[str, Query(max_length=16)] = "",
    tag: Annotated[str, Query(max_length=TAG_MAX)] = "",
    group: Annotated[str, Query(max_length=RUN_GROUP_MAX)] = "",
    q: Annotated[str, Query(max_length=200)] = "",
    sort: Sort = "created",
    order: Order = "desc",
    page_number: Annotated[int, Query(alias="page", ge=1, le=INT32_MAX)] = 1,
    where: Annotated[str, Query(max_length=1000)] = "",
) -> Response:
    access = _viewer(context, user, project)
    table = TableQuery(project, status, tag.strip(), group.strip(), q.strip(), sort, order,
                       page_number, where.strip())  # fmt: skip
    runs, total = page_runs(session, project_id=access.project_id, flt=table.filter(),
                            sort=table.sort, descending=table.order == "desc",
                            offset=(table.page - 1) * PER_PAGE, limit=PER_PAGE)  # fmt: skip
    pinned = set(session.scalars(select(PinnedRun.run_path).where(
        PinnedRun.project_id == access.project_id,
        PinnedRun.run_path.in_([run.path for run in runs]),
    ))) if runs else set()  # fmt: skip
    groups, tags = _suggestions(session, access.project_id)
    now = datetime.now(UTC)
    stalled_after = timedelta(minutes=context.settings.run_stalled_minutes)
    run_ids = [run.id for run in runs]
    live = f"/api/v1/projects/{quote(project)}/state?" + urlencode([("run", i) for i in run_ids])
    board = _board(session, access)
    values = {
        "project": project,
        "role": access.role,
        "is_owner": access.role == Role.owner,
        "can_edit": access.role.rank >= Role.editor.rank,
        "board": board,
        "runs": [
            (run, run_state(run, now=now, stalled_after=stalled_after), run.path in pinned)
            for run in runs
        ],
        "total": total,
        "pages": max(1, -(-total // PER_PAGE)),
        "table": table,
        "statuses": [s.value for s in RunStatus],
        "sorts": list(SORTS),
        "health": run_badges(session, project_id=access.project_id, run_ids=run_ids),
        "hparam_keys": _common_keys([effective_params(run)[0] for run in runs]),
        "metric_keys": _common_keys([effective_params(run)[1] for run in runs]),
        "groups": groups,
        "tags": tags,
        "live_url": live,
        "back": table.link(page=table.page),
        **project_views(context, session, user, project),
    }
    values["prefetch"] = board_prefetch(context, project)
    values["prerender"] = board_prerender(context, session, access, board["state"], values)
    return page(request, "project.html", values, user=user)


def board_prefetch(context: AppContext, project: str) -> list[str]:
    """TensorBoard's stamped scripts on this board's path, for the project page to prefetch,
    whatever the board's state: the board answers them while it serves, the control plane
    otherwise, without starting a stopped board (api/board_gate.board_for_asset), so even
    the first visit of a fresh browser to a stopped board finds them cached. Not in
    own-origin mode: the board is another site there, with a cache of its own."""
    if context.board_origins is not None:
        return []
    return [f"/boards/{quote(project)}/{src}" for src in stamped_files()]


def board_prerender(
    context: AppContext, session: Session, access: ProjectAccess, state: str,
    values: dict[str, Any],
) -> str | None:  # fmt: skip
    """The board page the project page asks Chromium to prerender (Speculation Rules): its
    "Open board" then shows a page whose script has run and whose data has come in. While
    the board serves or starts; and while it is stopped, when it would start within the
    memory budget beside the boards that run, none evicted for it (the prerender's request
    starts it, as a click would: opening the project page warms its board; an unopened one
    stops when idle like any other). Only the project's own board (a default view opens
    through a redirect), not in own-origin mode (the board is another site there), not when
    the operator turned it off (TBHUB_BOARD_PRERENDER)."""
    settings = context.settings
    if (not settings.board_prerender or context.board_origins is not None
            or values.get("opens_on_default_view")):  # fmt: skip
        return None
    warm = state in SERVING_OR_STARTING or (
        state == "stopped" and starts_without_eviction(session, access.project_id, settings)
    )
    return f"/boards/{quote(access.name)}/" if warm else None


@router.get("/projects/{project}/runs/{run_id}")
def run_page(
    request: Request,
    project: ProjectInPath,
    run_id: RunId,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
) -> Response:
    access = _viewer(context, user, project)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    pin = select(PinnedRun.id).where(
        PinnedRun.project_id == access.project_id, PinnedRun.run_path == run.path
    )
    files: list[RunFile] = []
    more = False
    storage_error = None
    if run.retention_state == RetentionState.present:
        storage = context.settings.storage
        try:
            files, more = within(project, lambda: list_run_files(storage, project, run.path))
        except StorageUnavailable as exc:  # a hung or dropped mount: the rest still shows
            storage_error = exc.message
    now = datetime.now(UTC)
    stalled_after = timedelta(minutes=context.settings.run_stalled_minutes)
    values = {
        "project": project,
        "run": run,
        "state": run_state(run, now=now, stalled_after=stalled_after),
        "pinned": session.scalar(pin) is not None,
        "is_owner": access.role == Role.owner,
        "can_edit": access.role.rank >= Role.editor.rank,
        "history": run_history(session, run=run),
        "incidents": run_timeline(session, project=access, run_path=run.path),
        "files": files,
        "more_files": more,
        "storage_error": storage_error,
        "board": _board(session, access),
        "board_links": board_filter_links(project, run.path),
        "live_url": f"/api/v1/projects/{quote(project)}/state?run={run.id}",
        "back": f"/projects/{quote(project)}/runs/{run.id}",
    }
    return page(request, "run.html", values, user=user)


@router.get("/projects/{project}/runs/{run_id}/sparkline.svg")
def sparkline(
    project: ProjectInPath, run_id: RunId, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    """The run's loss (or first scalar) as a small SVG, from its own event files, read on
    from where the last request stopped (storage/scalars.py)."""
    access = _viewer(context, user, project)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    curves = {}
    if run.retention_state == RetentionState.present:
        curves = context.scalars.curves(project, run.path)
    name = pick_curve(curves)
    svg = sparkline_svg(curves.get(name, []) if name else [], name=name)
    return Response(svg, media_type="image/svg+xml",
                    headers={"Cache-Control": "private, max-age=10"})  # fmt: skip


def _back(project: str, next_path: str) -> str:
    """Back to where the form was (its filters and page), if that is this project's page."""
    target = safe_next(next_path)
    own = f"/projects/{quote(project)}"
    return target if target == own or target.startswith((own + "?", own + "/")) else own


PinForm = Annotated[str, Form(max_length=TOKEN_MAX)]
NextForm = Annotated[str, Form(max_length=URL_PATH_MAX)]


@router.post("/projects/{project}/runs/{run_id}/{action}")
def pin_or_unpin(
    request: Request,
    project: ProjectInPath,
    run_id: RunId,
    action: Literal["pin", "unpin"],
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: PinForm = "",
    next: NextForm = "",
) -> Response:
    """Pin a run (retention never removes it) or unpin it: the same pins as the API's."""
    check_form_token(request, csrf_token, action)
    access = _viewer(context, user, project, Role.editor)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    if action == "pin":
        retention.pin_run(session, context.settings, project=project, run_path=run.path,
                          actor=user.name)  # fmt: skip
    else:
        retention.unpin_run(session, project=project, run_path=run.path, actor=user.name)
    return done(_back(project, next), f"run_{action}ned")
