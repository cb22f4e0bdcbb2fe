"""/api/v1/projects/<p>/runs: register, list, read, update and trash runs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field, StrictBool, field_validator

from tbhub.api.fields import MAX_INT64, FiniteFloat, HParamValue, Key, PlainStr, TagStr
from tbhub.auth.caller import require_project
from tbhub.deps import CallerDep, ContextDep, SessionDep
from tbhub.errors import AlreadyExists, InvalidInput
from tbhub.jobs.trash import trash_run
from tbhub.models import RetentionState, Role, Run, RunStatus
from tbhub.runs import (
    RunFields,
    RunFilter,
    get_run,
    list_runs,
    register_run,
    run_logdir,
    update_run,
    upload_url,
)
from tbhub.settings import Settings

router = APIRouter(prefix="/api/v1", tags=["runs"])

ProjectName = Annotated[str, Path(max_length=63, description="The project's slug")]
RunId = Annotated[int, Path(ge=1, le=MAX_INT64)]


class RunCreate(BaseModel):
    name: PlainStr = Field(min_length=1, max_length=100, description="Letters, digits, '._=+,@-'")
    group: PlainStr | None = Field(
        default=None, max_length=255, description="Up to 4 parts joined by '/', e.g. 'ablations/lr'"
    )
    hparams: dict[Key, HParamValue] = Field(default_factory=dict, max_length=256)
    tags: list[TagStr] = Field(default_factory=list, max_length=32)
    git_commit: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{4,64}$")
    git_branch: PlainStr | None = Field(default=None, max_length=255)
    git_dirty: StrictBool | None = None
    dataset_version: PlainStr | None = Field(default=None, max_length=255)
    command: str | None = Field(default=None, max_length=8192)
    host: PlainStr | None = Field(default=None, max_length=255)
    notes: str | None = Field(default=None, max_length=10_000)
    status: RunStatus = RunStatus.running

    @field_validator("status")
    @classmethod
    def _not_discovered(cls, value: RunStatus) -> RunStatus:
        if value == RunStatus.discovered:
            raise ValueError("'discovered' is tbhub's own; use running, finished, failed, killed")
        return value


class RunPatch(BaseModel):
    """Fields left out stay as they are; metrics are merged into the run's summary."""

    status: RunStatus | None = None
    metrics: dict[Key, FiniteFloat] | None = Field(default=None, max_length=256)
    notes: str | None = Field(default=None, max_length=10_000)
    tags: list[TagStr] | None = Field(default=None, max_length=32)


class RunOut(BaseModel):
    id: int
    project: str
    name: str
    group: str | None
    path: str = Field(description="The run's directory inside the project")
    logdir: str = Field(description="Absolute path of the run's directory on the storage")
    upload_url: str = Field(description="Where files go when the storage is not shared")
    status: RunStatus
    source: str
    retention_state: RetentionState
    trash_id: int | None
    hparams: dict[str, Any]
    metrics: dict[str, float]
    tags: list[str]
    git_commit: str | None
    git_branch: str | None
    git_dirty: bool | None
    dataset_version: str | None
    command: str | None
    host: str | None
    notes: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    first_write: datetime | None
    last_write: datetime | None
    bytes: int
    files: int

    @classmethod
    def of(cls, run: Run, project: str, settings: Settings) -> RunOut:
        return cls(
            id=run.id,
            project=project,
            name=run.name,
            group=run.group,
            path=run.path,
            logdir=str(run_logdir(settings.storage, project, run)),
            upload_url=upload_url(project, run.id),
            status=run.status,
            source=run.source.value,
            retention_state=run.retention_state,
            trash_id=run.trash_entry_id,
            hparams=run.hparams,
            metrics=run.metrics,
            tags=run.tags,
            git_commit=run.git_commit,
            git_branch=run.git_branch,
            git_dirty=run.git_dirty,
            dataset_version=run.dataset_version,
            command=run.command,
            host=run.host,
            notes=run.notes,
            created_by=run.created_by,
            created_at=run.created_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
            first_write=run.first_write,
            last_write=run.last_write,
            bytes=run.bytes,
            files=run.files,
        )


class RunPage(BaseModel):
    runs: list[RunOut]
    next_cursor: int | None = Field(description="Pass as `cursor` for the next page; null: done")


@router.post("/projects/{project}/runs", status_code=201, response_model=RunOut)
def create_run(
    project: ProjectName, body: RunCreate, caller: CallerDep, context: ContextDep
) -> RunOut:
    """Register a run: its directory is created and returned as `logdir`."""
    access = require_project(context.access, caller, project, Role.editor)
    run = register_run(
        context.factory,
        storage_root=context.settings.storage,
        project=project,
        project_id=access.project_id,
        name=body.name,
        group=body.group,
        fields=RunFields(
            hparams=body.hparams,
            tags=body.tags,
            git_commit=body.git_commit,
            git_branch=body.git_branch,
            git_dirty=body.git_dirty,
            dataset_version=body.dataset_version,
            command=body.command,
            host=body.host,
            notes=body.notes,
            status=body.status,
        ),
        actor=caller.name,
    )
    return RunOut.of(run, project, context.settings)


@router.get("/projects/{project}/runs", response_model=RunPage)
def list_project_runs(
    project: ProjectName,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    status: Annotated[list[RunStatus] | None, Query(max_length=5)] = None,
    tag: Annotated[str | None, Query(max_length=64)] = None,
    group: Annotated[str | None, Query(max_length=255)] = None,
    q: Annotated[str | None, Query(max_length=200, description="Text in path or notes")] = None,
    since: Annotated[datetime | None, Query(description="Registered at or after")] = None,
    until: Annotated[datetime | None, Query(description="Registered before")] = None,
    include_removed: Annotated[bool, Query(description="Also trashed or archived runs")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[int | None, Query(ge=1, le=MAX_INT64)] = None,
) -> RunPage:
    """Runs, newest first, a page at a time."""
    access = require_project(context.access, caller, project, Role.viewer)
    for moment in (since, until):
        if moment is not None and moment.tzinfo is None:
            raise InvalidInput("give `since` and `until` with a time zone, e.g. 2026-01-31T12:00Z")
    runs, next_cursor = list_runs(
        session,
        project_id=access.project_id,
        flt=RunFilter(
            status=status,
            tag=tag,
            group=group,
            text=q,
            since=since,
            until=until,
            include_removed=include_removed,
        ),
        limit=limit,
        cursor=cursor,
    )
    return RunPage(
        runs=[RunOut.of(r, project, context.settings) for r in runs], next_cursor=next_cursor
    )


@router.get("/projects/{project}/runs/{run_id}", response_model=RunOut)
def read_run(
    project: ProjectName, run_id: RunId, caller: CallerDep, context: ContextDep, session: SessionDep
) -> RunOut:
    access = require_project(context.access, caller, project, Role.viewer)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    return RunOut.of(run, project, context.settings)


@router.patch("/projects/{project}/runs/{run_id}", response_model=RunOut)
def patch_run(
    project: ProjectName,
    run_id: RunId,
    body: RunPatch,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> RunOut:
    """Set the status (how the run ended), merge summary metrics, replace notes or tags."""
    access = require_project(context.access, caller, project, Role.editor)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    update_run(
        session,
        run=run,
        project=project,
        status=body.status,
        metrics=body.metrics,
        notes=body.notes,
        tags=body.tags,
        actor=caller.name,
    )
    return RunOut.of(run, project, context.settings)


@router.delete("/projects/{project}/runs/{run_id}", response_model=RunOut)
def delete_run(
    project: ProjectName, run_id: RunId, caller: CallerDep, context: ContextDep
) -> RunOut:
    """Move the run's directory to the retention trash (restorable by an operator with
    `tbhub admin trash restore <trash_id>` until the grace period ends)."""
    access = require_project(context.access, caller, project, Role.editor)
    with context.factory() as session:
        run = get_run(session, project_id=access.project_id, run_id=run_id)
        if run.retention_state != RetentionState.present:
            raise AlreadyExists(
                f"run {run_id} is already {run.retention_state.value}; an operator can bring a "
                "trashed run back with `tbhub admin trash restore`"
            )
    trash_run(context.factory, context.settings, project=project, run_id=run_id, actor=caller.name)
    with context.factory() as session:
        run = get_run(session, project_id=access.project_id, run_id=run_id)
        return RunOut.of(run, project, context.settings)
