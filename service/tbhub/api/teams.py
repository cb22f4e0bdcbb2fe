"""/api/v1/teams: teams and their members, for instance admins (project owners give teams
roles through /api/v1/projects/<p>/teams)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from tbhub.api.users import require_admin
from tbhub.domain import teams
from tbhub.http.deps import ContextDep, CurrentUser, SessionDep, UserNameInPath

router = APIRouter(prefix="/api/v1", tags=["teams"])
TeamInPath = Annotated[str, Path(min_length=1, max_length=64)]


class TeamIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64)


@router.get("/teams")
def list_teams(user: CurrentUser, session: SessionDep) -> dict[str, Any]:
    require_admin(user)
    return {"teams": teams.list_teams(session)}


@router.post("/teams", status_code=201)
def create_team(body: TeamIn, user: CurrentUser, session: SessionDep) -> dict[str, str]:
    require_admin(user)
    teams.create_team(session, name=body.name, actor=user.name)
    return {"name": body.name}


@router.delete("/teams/{team}", status_code=204)
def delete_team(
    team: TeamInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> None:
    require_admin(user)
    teams.delete_team(session, name=team, actor=user.name)
    context.invalidate(context.access, after=session)


@router.put("/teams/{team}/members/{member}", status_code=204)
def add_member(
    team: TeamInPath, member: UserNameInPath, user: CurrentUser, session: SessionDep,
    context: ContextDep,
) -> None:  # fmt: skip
    require_admin(user)
    teams.add_member(session, team=team, user=member, actor=user.name)
    context.invalidate(context.access, after=session)


@router.delete("/teams/{team}/members/{member}", status_code=204)
def remove_member(
    team: TeamInPath, member: UserNameInPath, user: CurrentUser, session: SessionDep,
    context: ContextDep,
) -> None:  # fmt: skip
    require_admin(user)
    teams.remove_member(session, team=team, user=member, actor=user.name)
    context.invalidate(context.access, after=session)
