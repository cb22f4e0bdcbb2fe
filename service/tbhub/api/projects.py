"""/api/v1/projects: what the caller may see."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from tbhub.api.retention import require_owner
from tbhub.deps import ContextDep, CurrentUser, ProjectInPath, SessionDep
from tbhub.errors import NotFound
from tbhub.jobs import retention
from tbhub.models import Project, Role
from tbhub.names import check_project_name
from tbhub.projects import visible_projects
from tbhub.supervisor.plan import board_prefix

router = APIRouter(prefix="/api/v1", tags=["projects"])


class BoardOut(BaseModel):
    desired_state: str
    observed_state: str
    last_access_at: datetime | None


class ProjectOut(BaseModel):
    name: str
    role: Role | None
    board_url: str
    board: BoardOut | None

    @classmethod
    def of(cls, project: Project, role: Role | None) -> ProjectOut:
        board = project.board
        return cls(
            name=project.name,
            role=role,
            board_url=board_prefix(project.name) + "/",
            board=BoardOut(
                desired_state=board.desired_state,
                observed_state=board.observed_state,
                last_access_at=board.last_access_at,
            )
            if board
            else None,
        )


@router.get("/projects", response_model=list[ProjectOut])
def list_projects(user: CurrentUser, session: SessionDep) -> list[ProjectOut]:
    """Projects the caller is a member of (every project, for an instance admin)."""
    return [ProjectOut.of(p, role) for p, role in visible_projects(session, user=user)]


@router.get("/projects/{name}", response_model=ProjectOut)
def get_project(name: ProjectInPath, user: CurrentUser, session: SessionDep) -> ProjectOut:
    check_project_name(name)
    for project, role in visible_projects(session, user=user):
        if project.name == name:
            return ProjectOut.of(project, role)
    # Same answer whether it does not exist or the caller may not see it.
    raise NotFound(
        f"no project named {name!r} that you can see; list yours with GET /api/v1/projects"
    )


@router.delete("/projects/{name}")
def delete_project(
    name: ProjectInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> dict[str, object]:
    """Owners and admins: every run goes to the trash (restorable until purged), then the
    project's members, board, policy, pins and share links."""
    require_owner(session, user, name)
    report = retention.delete_project(context.factory, context.settings, project=name,
                                      actor=user.name)  # fmt: skip
    context.access.invalidate()
    return {"project": name, "deleted": True, "trashed_runs": report.trashed,
            "bytes": report.bytes}  # fmt: skip
