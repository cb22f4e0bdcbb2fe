"""The projects page (`/`): the projects the user can open, each with its board state, last
activity, runs by status and storage against its quota; a search box; and "Create project"
for whoever the instance lets create them (TBHUB_PROJECT_CREATION)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.core.bounds import PROJECT_NAME_MAX, TOKEN_MAX
from tbhub.core.errors import AlreadyExists, InvalidInput
from tbhub.core.models import User
from tbhub.domain.overview import STATUS_ORDER, matching, summarize_projects
from tbhub.domain.projects import add_project, visible_projects
from tbhub.domain.retention_policy import default_policy
from tbhub.http.deps import AppContext, ContextDep, SessionDep
from tbhub.web.render import WebUser, caller_of, check_form_token, done, page

router = APIRouter(include_in_schema=False)

SearchText = Annotated[str, Query(max_length=PROJECT_NAME_MAX)]


def may_create(context: AppContext, user: User) -> bool:
    return user.is_admin or context.settings.project_creation == "anyone"


def projects_page(
    request: Request,
    context: AppContext,
    session: Session,
    user: User,
    *,
    q: str = "",
    new_name: str = "",
    create_error: str | None = None,
    status_code: int = 200,
) -> Response:
    everything = visible_projects(session, user=user)
    shown = matching(everything, q)
    summaries = summarize_projects(
        session, shown, default_policy=default_policy(context.settings), usage=context.usage
    )
    values = {
        "projects": summaries,
        "any_projects": bool(everything),
        "q": q.strip(),
        "statuses": STATUS_ORDER,
        "may_create": may_create(context, user),
        "new_name": new_name,
        "create_error": create_error,
    }
    return page(request, "home.html", values, user=user, status_code=status_code)


@router.get("/")
def home(
    request: Request, user: WebUser, session: SessionDep, context: ContextDep, q: SearchText = ""
) -> Response:
    return projects_page(request, context, session, user, q=q)


@router.post("/projects")
def create(
    request: Request,
    user: WebUser,
    context: ContextDep,
    session: SessionDep,
    name: Annotated[str, Form(max_length=PROJECT_NAME_MAX)] = "",
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "new project")
    settings = context.settings
    try:
        add_project(context.factory, context.access, caller_of(user), name=name, owner=None,
                    storage_root=settings.storage,
                    anyone=settings.project_creation == "anyone")  # fmt: skip
    except (InvalidInput, AlreadyExists) as exc:
        return projects_page(request, context, session, user, new_name=name,
                             create_error=exc.message, status_code=exc.http_status)  # fmt: skip
    return done(f"/projects/{name}", "project_created")
