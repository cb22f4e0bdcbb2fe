"""/api/v1/projects: what the caller may see."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, effective_role, require_project
from tbhub.auth.permissions import Access
from tbhub.deps import CallerDep, ContextDep, ProjectInPath, SessionDep
from tbhub.errors import NotFound
from tbhub.jobs import retention
from tbhub.models import Project, Role, User
from tbhub.projects import visible_projects
from tbhub.storage.paths import project_dir
from tbhub.supervisor.plan import board_prefix

router = APIRouter(prefix="/api/v1", tags=["projects"])


class BoardOut(BaseModel):
    desired_state: str
    observed_state: str
    last_access_at: datetime | None


class ProjectOut(BaseModel):
    name: str
    role: Role | None = Field(description="Your role (capped by a token's scope); null for an "
                              "instance admin who is not a member")  # fmt: skip
    board_url: str
    logdir: str = Field(description="The project's directory on the storage: runs go below it")
    board: BoardOut | None

    @classmethod
    def of(cls, project: Project, role: Role | None, storage_root: Path) -> ProjectOut:
        board = project.board
        return cls(
            name=project.name,
            role=role,
            board_url=board_prefix(project.name) + "/",
            logdir=str(project_dir(storage_root, project.name)),
            board=BoardOut(
                desired_state=board.desired_state,
                observed_state=board.observed_state,
                last_access_at=board.last_access_at,
            )
            if board
            else None,
        )


def caller_projects(caller: Caller, session: Session) -> list[tuple[Project, Role | None]]:
    """The projects the caller reaches, with its role: a token sees only those it names,
    with its role capped by its scope."""
    user = session.get_one(User, caller.user_id)
    rows = visible_projects(session, user=user)
    if caller.grant is None:
        return rows
    reached: list[tuple[Project, Role | None]] = []
    for project, role in rows:
        access = Access(user_exists=True, is_admin=user.is_admin, project_id=project.id, role=role)
        capped = effective_role(caller, access)
        if capped is not None:
            reached.append((project, capped))
    return reached


@router.get("/projects", response_model=list[ProjectOut])
def list_projects(caller: CallerDep, session: SessionDep, context: ContextDep) -> list[ProjectOut]:
    """Projects the caller is a member of (every project, for an instance admin)."""
    storage = context.settings.storage
    return [ProjectOut.of(p, role, storage) for p, role in caller_projects(caller, session)]


@router.get("/projects/{name}", response_model=ProjectOut)
def get_project(
    name: ProjectInPath,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> ProjectOut:
    """One project, with `logdir`: where its runs live on the storage."""
    require_project(context.access, caller, name, Role.viewer)
    for project, role in caller_projects(caller, session):
        if project.name == name:
            return ProjectOut.of(project, role, context.settings.storage)
    raise NotFound(
        f"no project named {name!r} that you can see; list yours with GET /api/v1/projects"
    )


@router.delete("/projects/{name}")
def delete_project(
    name: ProjectInPath, caller: CallerDep, context: ContextDep
) -> dict[str, object]:
    """Owners and admins: every run goes to the trash (restorable until purged), then the
    project's members, board, policy, pins and share links."""
    require_project(context.access, caller, name, Role.owner)
    report = retention.delete_project(context.factory, context.settings, project=name,
                                      actor=caller.name)  # fmt: skip
    context.access.invalidate()
    return {"project": name, "deleted": True, "trashed_runs": report.trashed,
            "bytes": report.bytes}  # fmt: skip
