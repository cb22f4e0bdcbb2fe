"""/api/v1/projects/<p>/members and /teams: who has which role, managed by owners."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from tbhub.auth.caller import require_project
from tbhub.core.models import Role
from tbhub.domain import teams
from tbhub.domain.projects import list_members, remove_membership, set_membership
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep, UserNameInPath

router = APIRouter(prefix="/api/v1", tags=["members"])


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role


@router.get("/projects/{name}/members")
def get_members(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The project's own members and the teams with a role in it (with their members)."""
    require_project(context.access, caller, name, Role.owner)
    return {
        "members": list_members(session, project=name),
        "teams": teams.project_teams(session, project=name),
    }


@router.put("/projects/{name}/members/{member}")
def put_member(
    name: ProjectInPath, member: UserNameInPath, body: RoleIn, caller: CallerDep,
    session: SessionDep, context: ContextDep,
) -> dict[str, str]:  # fmt: skip
    """Add a member, or change their role."""
    require_project(context.access, caller, name, Role.owner)
    set_membership(session, project=name, user=member, role=body.role, actor=caller.name)
    context.invalidate(context.access, after=session)
    return {"user": member, "role": body.role.value}


@router.delete("/projects/{name}/members/{member}", status_code=204)
def delete_member(
    name: ProjectInPath, member: UserNameInPath, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> None:  # fmt: skip
    require_project(context.access, caller, name, Role.owner)
    remove_membership(session, project=name, user=member, actor=caller.name)
    context.invalidate(context.access, after=session)


@router.put("/projects/{name}/teams/{team}")
def put_team(
    name: ProjectInPath, team: UserNameInPath, body: RoleIn, caller: CallerDep,
    session: SessionDep, context: ContextDep,
) -> dict[str, str]:  # fmt: skip
    """Give a team a role in the project, or change it."""
    require_project(context.access, caller, name, Role.owner)
    teams.grant(session, project=name, team=team, role=body.role, actor=caller.name)
    context.invalidate(context.access, after=session)
    return {"team": team, "role": body.role.value}


@router.delete("/projects/{name}/teams/{team}", status_code=204)
def delete_team_role(
    name: ProjectInPath, team: UserNameInPath, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> None:  # fmt: skip
    require_project(context.access, caller, name, Role.owner)
    teams.revoke(session, project=name, team=team, actor=caller.name)
    context.invalidate(context.access, after=session)
