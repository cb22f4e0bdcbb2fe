"""/api/v1/projects/<p>/runs: register, list, read, update and trash runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from tbhub.api.param_query import param_expressions
from tbhub.auth.caller import require_project
from tbhub.core.bounds import (
    INT64_MAX,
    RUN_GROUP_MAX,
    TAG_MAX,
    Command,
    FiniteFloat,
    GitCommit,
    GroupName,
    HParamValue,
    MetricName,
    Notes,
    RunName,
    ShortText,
    Tag,
)
from tbhub.core.db import transaction
from tbhub.core.errors import AlreadyExists
from tbhub.core.models import RetentionState, Role, Run, RunStatus
from tbhub.core.settings import Settings
from tbhub.core.timestamps import Timestamp, parse_moment
from tbhub.domain.hparams_sync import sync_hparams_file
from tbhub.domain.runs import (
    RunFields,
    RunFilter,
    get_run,
    list_runs,
    register_run,
    run_logdir,
    update_run,
    upload_url,
)
from tbhub.housekeeping.trash import trash_run
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["runs"])

RunId = Annotated[int, Path(ge=1, le=INT64_MAX)]
WHEN = "Registered {}: ISO 8601 with a time zone, e.g. 2026-01-31T12:00Z"


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: RunName = Field(description="Letters, digits and '._=+,@-'; no '..'")
    group: GroupName | None = Field(
        default=None, description="Up to 4 parts joined by '/', e.g. 'ablations/lr'"
    )
    hparams: dict[MetricName, HParamValue] = Field(default_factory=dict, max_length=256)
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    git_commit: GitCommit | None = None
    git_branch: ShortText | None = None
    git_dirty: StrictBool | None = None
    dataset_version: ShortText | None = None
    command: Command | None = None
    host: ShortText | None = None
    notes: Notes | None = None
    status: RunStatus = RunStatus.running

    @field_validator("status")
    @classmethod
    def _not_discovered(cls, value: RunStatus) -> RunStatus:
        if value == RunStatus.discovered:
            raise ValueError("'discovered' is tbhub's own; use running, finished, failed, killed")
        return value


class RunPatch(BaseModel):
    """Fields left out stay as they are; metrics are merged into the run's summary."""

    model_config = ConfigDict(extra="forbid")

    status: RunStatus | None = None
    metrics: dict[MetricName, FiniteFloat] | None = Field(default=None, max_length=256)
    hparams: dict[MetricName, HParamValue] | None = Field(
        default=None, max_length=256, description="Merged into the run's hyperparameters"
    )
    notes: Notes | None = None
    tags: list[Tag] | None = Field(default=None, max_length=32)
    dataset_version: ShortText | None = None


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
    created_at: Timestamp
    updated_at: Timestamp
    finished_at: Timestamp | None
    first_write: Timestamp | None
    last_write: Timestamp | None
    bytes: int
    files: int
    hparams_file_error: str | None = Field(
        description="Why the run's hparams event file (read by TensorBoard's HPARAMS tab) "
        "could not be written; null: it is up to date"
    )
    logged_hparams: dict[str, Any] = Field(
        description="Hyperparameters the training code wrote into its event files "
        "(add_hparams, the HF Trainer's arguments, Lightning); a key also in `hparams` is "
        "searched and sorted by the registered value"
    )
    logged_metrics: dict[str, float] = Field(
        description="Metrics the training code named with add_hparams (or Lightning's "
        "hp_metric): the last value of each; `metrics` wins for a key in both"
    )

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
            hparams_file_error=run.hparams_file_error,
            logged_hparams=run.logged_hparams or {},
            logged_metrics=run.logged_metrics or {},
        )


class RunPage(BaseModel):
    runs: list[RunOut]
    next_cursor: int | None = Field(description="Pass as `cursor` for the next page; null: done")


@router.post("/projects/{project}/runs", status_code=201, response_model=RunOut)
def create_run(
    project: ProjectInPath, body: RunCreate, caller: CallerDep, context: ContextDep
) -> Response:
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
    sync_hparams_file(context.factory, storage_root=context.settings.storage, project=project,
                      run=run, fresh=True)  # fmt: skip
    # Built and checked once, sent as is: a RunOut returned would be checked against the
    # model again (on one more threadpool hop) before being turned into JSON.
    answer = RunOut.of(run, project, context.settings).model_dump_json()
    return Response(answer, status_code=201, media_type="application/json")


@router.get("/projects/{project}/runs", response_model=RunPage)
def list_project_runs(
    request: Request,
    project: ProjectInPath,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    status: Annotated[list[RunStatus] | None, Query(max_length=5)] = None,
    tag: Annotated[str | None, Query(max_length=TAG_MAX)] = None,
    group: Annotated[str | None, Query(max_length=RUN_GROUP_MAX)] = None,
    q: Annotated[str | None, Query(max_length=200, description="Text in path or notes")] = None,
    since: Annotated[
        str | None, Query(max_length=40, description=WHEN.format("at or after"))
    ] = None,
    until: Annotated[str | None, Query(max_length=40, description=WHEN.format("before"))] = None,
    include_removed: Annotated[bool, Query(description="Also trashed or archived runs")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[int | None, Query(ge=1, le=INT64_MAX)] = None,
) -> RunPage:
    """Runs, newest first, a page at a time. hparam./metric. conditions narrow them as in
    GET /api/v1/runs (e.g. `?hparam.lr=0.1&metric.accuracy>=0.9`)."""
    params = tuple(param_expressions(request))
    access = require_project(context.access, caller, project, Role.viewer)
    runs, next_cursor = list_runs(
        session,
        project_id=access.project_id,
        flt=RunFilter(
            status=status,
            tag=tag,
            group=group,
            text=q,
            since=parse_moment("since", since),
            until=parse_moment("until", until),
            include_removed=include_removed,
            params=params,
        ),
        limit=limit,
        cursor=cursor,
    )
    return RunPage(
        runs=[RunOut.of(r, project, context.settings) for r in runs], next_cursor=next_cursor
    )


@router.get("/projects/{project}/runs/{run_id}", response_model=RunOut)
def read_run(
    project: ProjectInPath,
    run_id: RunId,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> RunOut:
    access = require_project(context.access, caller, project, Role.viewer)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    return RunOut.of(run, project, context.settings)


@router.patch("/projects/{project}/runs/{run_id}", response_model=RunOut)
def patch_run(
    project: ProjectInPath,
    run_id: RunId,
    body: RunPatch,
    caller: CallerDep,
    context: ContextDep,
) -> RunOut:
    """Set the status (how the run ended), merge summary metrics and hyperparameters,
    replace notes, tags or the dataset version. New hyperparameters or metrics go into the
    run's hparams event file once the change has committed."""
    access = require_project(context.access, caller, project, Role.editor)
    with transaction(context.factory) as session:
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
            hparams=body.hparams,
            dataset_version=body.dataset_version,
        )
    if body.hparams is not None or body.metrics is not None:
        sync_hparams_file(context.factory, storage_root=context.settings.storage,
                          project=project, run=run)  # fmt: skip
    return RunOut.of(run, project, context.settings)


@router.delete("/projects/{project}/runs/{run_id}", response_model=RunOut)
def delete_run(
    project: ProjectInPath, run_id: RunId, caller: CallerDep, context: ContextDep
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
