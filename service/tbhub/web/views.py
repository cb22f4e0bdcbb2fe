"""A project's saved views in the web UI: `/projects/<p>/views/<id>` (a view's permanent
page: what it matches, the runs it shows, its board and the whole project one click away),
`/projects/<p>/views/default` (the default view of a big project), and the forms that save
the project page's filters as a view and delete one. The same service functions as
/api/v1/projects/<p>/views do the work (domain/views.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.auth.caller import require_project
from tbhub.core.bounds import INT64_MAX, RUN_GROUP_MAX, TAG_MAX, TOKEN_MAX
from tbhub.core.models import Role, Run, SavedView, User
from tbhub.domain.views import (
    VIEW_NAME_MAX,
    count_present_runs,
    create_view,
    default_view,
    delete_view,
    get_view,
    list_views,
    parse_view_filter,
    view_run_ids,
)
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.supervisor.plan import board_prefix
from tbhub.web.render import WebUser, caller_of, check_form_token, done, page

router = APIRouter(include_in_schema=False)

ViewId = Annotated[int, Path(ge=1, le=INT64_MAX)]
SHOWN_RUNS = 50  # the view's page lists its newest runs, this many


def project_views(
    context: AppContext, session: Session, user: User, project: str
) -> dict[str, Any]:
    """What the project page shows about views: those the user may use, whether the project
    is big enough to open on its default view, and how many runs it has."""
    access = require_project(context.access, caller_of(user), project, Role.viewer)
    runs = count_present_runs(session, access.project_id)
    over = context.settings.default_view_over_runs
    return {
        "views": list_views(
            session, access=context.access, caller=caller_of(user), project=project
        ),
        "project_runs": runs,
        "opens_on_default_view": bool(over) and runs > over,
        "can_make_views": access.role.rank >= Role.editor.rank,
    }


def _view_page(request: Request, context: AppContext, session: Session, user: User,
               view: SavedView) -> Response:  # fmt: skip
    project = view.project.name
    ids = view_run_ids(session, view)
    runs = session.scalars(select(Run).where(Run.id.in_(ids[:SHOWN_RUNS])).order_by(Run.id.desc()))
    access = require_project(context.access, caller_of(user), project, Role.viewer)
    values = {
        "project": project,
        "view": view,
        "runs": list(runs),
        "run_count": len(ids),
        "project_runs": count_present_runs(session, view.project_id),
        "board_url": board_prefix(view.board.slug) + "/",
        "whole_url": board_prefix(project) + "/",
        "may_delete": view.preset is None
        and (view.owner_id == user.id or access.role is Role.owner or user.is_admin),
        "shown": SHOWN_RUNS,
    }
    return page(request, "view.html", values, user=user)


@router.get("/projects/{project}/views/default")
def default_view_page(
    request: Request, project: ProjectInPath, user: WebUser, session: SessionDep,
    context: ContextDep,
) -> Response:  # fmt: skip
    """The project's default view: its recent, running and pinned runs (made on first use)."""
    view, made = default_view(session, access=context.access, caller=caller_of(user),
                              project=project)  # fmt: skip
    if made:  # a new board: every process's compare cache learns of it once this commits
        context.invalidate(context.compares, after=session)
    return _view_page(request, context, session, user, view)


@router.get("/projects/{project}/views/{view_id}")
def view_page(
    request: Request, project: ProjectInPath, view_id: ViewId, user: WebUser,
    session: SessionDep, context: ContextDep,
) -> Response:  # fmt: skip
    view = get_view(session, access=context.access, caller=caller_of(user), project=project,
                    view_id=view_id)  # fmt: skip
    return _view_page(request, context, session, user, view)


@router.post("/projects/{project}/views")
def save_view(
    request: Request,
    project: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    name: Annotated[str, Form(max_length=VIEW_NAME_MAX)],
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
    shared: Annotated[bool, Form()] = False,
    status: Annotated[str, Form(max_length=16)] = "",
    tag: Annotated[str, Form(max_length=TAG_MAX)] = "",
    group: Annotated[str, Form(max_length=RUN_GROUP_MAX)] = "",
    q: Annotated[str, Form(max_length=200)] = "",
    where: Annotated[str, Form(max_length=1000)] = "",
) -> Response:
    """Save the project page's filters as a view, then open its page."""
    check_form_token(request, csrf_token, "save view")
    flt = parse_view_filter({"status": [status] if status else [], "tag": tag.strip(),
                             "group": group.strip(), "q": q.strip(),
                             "params": where.split()})  # fmt: skip
    view = create_view(session, access=context.access, caller=caller_of(user), project=project,
                       name=name, shared=shared, flt=flt)  # fmt: skip
    context.invalidate(context.compares, after=session)
    return RedirectResponse(f"/projects/{project}/views/{view.id}", status_code=303)


@router.post("/projects/{project}/views/{view_id}/delete")
def delete_view_form(
    request: Request,
    project: ProjectInPath,
    view_id: ViewId,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "delete view")
    delete_view(session, access=context.access, caller=caller_of(user), project=project,
                view_id=view_id)  # fmt: skip
    context.invalidate(context.compares, after=session)
    context.wake_supervisor()
    return done(f"/projects/{project}", "view_deleted")
