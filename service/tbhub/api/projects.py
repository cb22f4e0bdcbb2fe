"""/api/v1/projects: what the caller may see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, effective_role, require_project
from tbhub.auth.permissions import Access
from tbhub.core.bounds import INT64_MAX, PROJECT_NAME_MAX, USER_NAME_MAX
from tbhub.core.errors import NotFound
from tbhub.core.models import Board, Project, Role, Run, RunStatus, User
from tbhub.core.timestamps import Timestamp
from tbhub.domain.overview import board_detail, board_state, run_state
from tbhub.domain.projects import add_project, visible_projects
from tbhub.housekeeping import retention
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep
from tbhub.storage.paths import project_path, project_problem
from tbhub.supervisor.plan import board_prefix

router = APIRouter(prefix="/api/v1", tags=["projects"])


class BoardOut(BaseModel):
    desired_state: str
    observed_state: str
    state: str = Field(description="What the pages show: live, starting, restarting, stopping, "
                       "stopped, failed or no-capacity")  # fmt: skip
    detail: str | None = Field(description="Why, when there is more to say (a failure's last "
                               "line, a memory backoff)")  # fmt: skip
    last_access_at: Timestamp | None

    @classmethod
    def of(cls, board: Board | None) -> BoardOut | None:
        if board is None:
            return None
        return cls(
            desired_state=board.desired_state,
            observed_state=board.observed_state,
            state=board_state(board),
            detail=board_detail(board),
            last_access_at=board.last_access_at,
        )


class ProjectOut(BaseModel):
    name: str
    role: Role | None = Field(description="Your role (capped by a token's scope); null for an "
                              "instance admin who is not a member")  # fmt: skip
    board_url: str
    logdir: str = Field(description="The project's directory on the storage: runs go below it")
    storage_error: str | None = Field(
        default=None,
        description="Why the project's directory is refused (a symlink or bind mount where "
        "a real directory should be): no board, upload or run registration until it is fixed",
    )
    board: BoardOut | None

    @classmethod
    def of(cls, project: Project, role: Role | None, storage_root: Path) -> ProjectOut:
        return cls(
            name=project.name,
            role=role,
            board_url=board_prefix(project.name) + "/",
            logdir=str(project_path(storage_root, project.name)),
            storage_error=project_problem(storage_root, project.name),
            board=BoardOut.of(project.board),
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


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=PROJECT_NAME_MAX,
                      description="A slug: [a-z0-9][a-z0-9-]{0,62}")  # fmt: skip
    owner: str | None = Field(default=None, min_length=1, max_length=USER_NAME_MAX,
                              description="Who owns it (admins only); default: you")  # fmt: skip


@router.post("/projects", status_code=201, response_model=ProjectOut)
def create(body: ProjectCreate, caller: CallerDep, context: ContextDep) -> ProjectOut:
    """Create a project and its directory on the storage: instance admins, or anyone signed
    in when TBHUB_PROJECT_CREATION=anyone. The creator owns it unless an admin names another
    owner."""
    settings = context.settings
    project = add_project(context.factory, context.access, caller, name=body.name,
                          owner=body.owner, storage_root=settings.storage,
                          anyone=settings.project_creation == "anyone")  # fmt: skip
    role = Role.owner if body.owner in (None, caller.name) else None
    return ProjectOut.of(project, role, context.settings.storage)


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


class RunStateOut(BaseModel):
    id: int
    status: RunStatus
    state: str = Field(description="What the pages show: the status, `stalled` for a running "
                       "run whose files got nothing new for a while, or where retention moved "
                       "it (trashed, archived, purged)")  # fmt: skip
    last_write: Timestamp | None
    bytes: int


class ProjectStateOut(BaseModel):
    name: str
    board: BoardOut | None
    runs: list[RunStateOut]


RunIds = Annotated[
    list[Annotated[int, Field(ge=1, le=INT64_MAX)]],
    Query(alias="run", max_length=200, description="Ids of the runs to report on (repeat it)"),
]


@router.get("/projects/{name}/state", response_model=ProjectStateOut)
def project_state(
    name: ProjectInPath,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
    runs: RunIds = [],  # noqa: B006 - FastAPI copies defaults
) -> ProjectStateOut:
    """The board's state and the states of the runs named: what the pages poll to update
    their badges without a reload."""
    access = require_project(context.access, caller, name, Role.viewer)
    now = datetime.now(UTC)
    stalled_after = timedelta(minutes=context.settings.run_stalled_minutes)
    query = select(Run).where(Run.project_id == access.project_id, Run.id.in_(runs))
    rows = list(session.scalars(query.order_by(Run.id))) if runs else []
    states = [
        RunStateOut(id=run.id, status=run.status, last_write=run.last_write, bytes=run.bytes,
                    state=run_state(run, now=now, stalled_after=stalled_after))
        for run in rows
    ]  # fmt: skip
    board = BoardOut.of(session.get(Board, access.project_id))
    return ProjectStateOut(name=name, board=board, runs=states)


@router.delete("/projects/{name}")
def delete_project(
    name: ProjectInPath, caller: CallerDep, context: ContextDep
) -> dict[str, object]:
    """Owners and admins: every run goes to the trash (restorable until purged), then the
    project's members, board, policy, pins and share links."""
    require_project(context.access, caller, name, Role.owner)
    report = retention.delete_project(context.factory, context.settings, project=name,
                                      actor=caller.name)  # fmt: skip
    context.forget_identities()  # its roles, share links, tokens' reach, compare boards
    return {"project": name, "deleted": True, "trashed_runs": report.trashed,
            "bytes": report.bytes}  # fmt: skip
