"""/projects/<p>/members: who has which role in a project, people and teams; owners only.

The same rule as GET /api/v1/projects/<p>/members: owners (and instance admins) see and
change the list; anyone else gets 403 (404 if they cannot see the project at all). Every
action calls the service function the API calls, which writes the audit event, in a
transaction of its own: one the service refuses writes nothing, and the page says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, require_project
from tbhub.core.bounds import TOKEN_MAX, USER_NAME_MAX
from tbhub.core.errors import TbhubError
from tbhub.core.models import Role, User
from tbhub.domain import teams
from tbhub.domain.projects import list_members, remove_membership, set_membership
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep, UserNameInPath
from tbhub.web.render import WebUser, attempt, check_form_token, done, form_page

router = APIRouter(include_in_schema=False)

NameField = Annotated[str, Form(min_length=1, max_length=USER_NAME_MAX)]
RoleField = Annotated[Role, Form()]
CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]


def _show(
    request: Request, session: Session, user: User, project: str, *,
    error: TbhubError | None = None, form: dict[str, str] | None = None,
) -> Response:  # fmt: skip
    values = {
        "project": project,
        "tab": "members",
        "is_owner": True,  # only owners get here
        "members": list_members(session, project=project),
        "teams": teams.project_teams(session, project=project),
        "roles": [r.value for r in Role],
        "form": form or {},
    }
    return form_page(request, "members.html", values, user=user, error=error)


def _act(
    request: Request, session: Session, context: AppContext, user: User, project: str, *,
    csrf_token: str, what: str, action: Callable[[Session], object], notice: str,
    form: dict[str, str] | None = None,
) -> Response:  # fmt: skip
    """Every form here: its token, the owner check, the action; back to the page."""
    check_form_token(request, csrf_token, what)
    require_project(context.access, Caller.of_user(user), project, Role.owner)
    result = attempt(context.factory, action)
    if isinstance(result, TbhubError):
        return _show(request, session, user, project, error=result, form=form)
    context.access.invalidate()
    return done(f"/projects/{project}/members", notice)


@router.get("/projects/{name}/members")
def members_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    require_project(context.access, Caller.of_user(user), name, Role.owner)
    return _show(request, session, user, name)


@router.post("/projects/{name}/members")
def add_member(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep,
    context: ContextDep, member: NameField, role: RoleField, csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    """Add a person with a role (or give one who is a member already this role)."""
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="add member",
        action=lambda tx: set_membership(tx, project=name, user=member, role=role,
                                         actor=user.name),
        notice="member_added", form={"member": member},
    )  # fmt: skip


@router.post("/projects/{name}/members/{member}/role")
def change_member_role(
    request: Request, name: ProjectInPath, member: UserNameInPath, user: WebUser,
    session: SessionDep, context: ContextDep, role: RoleField, csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="change role",
        action=lambda tx: set_membership(tx, project=name, user=member, role=role,
                                         actor=user.name),
        notice="member_role_set",
    )  # fmt: skip


@router.post("/projects/{name}/members/{member}/remove")
def remove_member(
    request: Request, name: ProjectInPath, member: UserNameInPath, user: WebUser,
    session: SessionDep, context: ContextDep, csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="remove member",
        action=lambda tx: remove_membership(tx, project=name, user=member, actor=user.name),
        notice="member_removed",
    )  # fmt: skip


@router.post("/projects/{name}/teams")
def set_team_role(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep,
    context: ContextDep, team: NameField, role: RoleField, csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    """Give a team a role in the project, or change it."""
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="team role",
        action=lambda tx: teams.grant(tx, project=name, team=team, role=role, actor=user.name),
        notice="team_role_set", form={"team": team},
    )  # fmt: skip


@router.post("/projects/{name}/teams/{team}/remove")
def remove_team_role(
    request: Request, name: ProjectInPath, team: UserNameInPath, user: WebUser,
    session: SessionDep, context: ContextDep, csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="remove team",
        action=lambda tx: teams.revoke(tx, project=name, team=team, actor=user.name),
        notice="team_role_removed",
    )  # fmt: skip
