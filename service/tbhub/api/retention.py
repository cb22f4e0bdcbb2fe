"""/api/v1 retention policies (project owners and instance admins), pins (editors up) and a
project's trash (viewers read it, editors restore from it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from tbhub.auth.caller import require_admin, require_project
from tbhub.core.bounds import INT32_MAX, ByteCount, Count, Days, Minutes, RunPath
from tbhub.core.models import Role
from tbhub.core.timestamps import Timestamp
from tbhub.domain.retention_policy import default_policy
from tbhub.housekeeping import retention, trash
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, RunPathInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["retention"])


class PolicyIn(BaseModel):
    """Fields left out stay as they are; null goes back to the global default; 0 turns a
    limit off for this project."""

    model_config = ConfigDict(extra="forbid")

    max_age_days: Days | None = None
    keep_last: Count | None = None
    max_project_bytes: ByteCount | None = None
    action: Literal["trash", "archive"] | None = None
    active_minutes: Minutes | None = None


class PinIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run: RunPath = Field(description="The run's path inside the project, e.g. 'group/run-1'.")


@router.get("/retention/default")
def get_default(caller: CallerDep, context: ContextDep) -> dict[str, Any]:
    """The global default policy (from the settings)."""
    require_admin(caller, "see the global retention default")
    return default_policy(context.settings).as_dict()


@router.get("/projects/{name}/retention")
def get_policy(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The effective policy, the project's overrides, the default and the pinned runs."""
    require_project(context.access, caller, name, Role.owner)
    return retention.describe_policy(session, context.settings, project=name)


@router.put("/projects/{name}/retention")
def set_policy(
    name: ProjectInPath, body: PolicyIn, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    require_project(context.access, caller, name, Role.owner)
    values = body.model_dump(exclude_unset=True)
    retention.set_override(session, project=name, values=values, actor=caller.name)
    return retention.describe_policy(session, context.settings, project=name)


@router.post("/projects/{name}/retention/pins", status_code=201)
def pin(
    name: ProjectInPath, body: PinIn, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, str]:
    """Exempt a run that exists from retention (404, naming similar runs, if it does not)."""
    require_project(context.access, caller, name, Role.editor)
    retention.pin_run(session, context.settings, project=name, run_path=body.run, actor=caller.name)
    return {"project": name, "run": body.run}


@router.delete("/projects/{name}/retention/pins/{run:path}", status_code=204)
def unpin(
    name: ProjectInPath,
    run: RunPathInPath,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> None:
    require_project(context.access, caller, name, Role.editor)
    retention.unpin_run(session, project=name, run_path=run, actor=caller.name)


@router.get("/projects/{name}/retention/plan")
def plan(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The dry run for this project: what `tbhub admin retention apply` would remove now."""
    require_project(context.access, caller, name, Role.owner)
    [project_plan] = retention.plan_retention(context.factory, context.settings, project=name)
    return project_plan.summary()


class TrashEntryOut(BaseModel):
    id: int
    project: str
    run_path: str
    run: str
    bytes: int
    files: int
    reasons: list[str]
    trashed_by: str | None
    trashed_at: Timestamp | None
    purge_after: Timestamp | None


class TrashOut(BaseModel):
    entries: list[TrashEntryOut]


@router.get("/projects/{name}/trash", response_model=TrashOut)
def get_trash(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> TrashOut:
    """The project's runs in the trash (removed by retention or DELETE), until purged."""
    require_project(context.access, caller, name, Role.viewer)
    entries = trash.project_trash(session, project=name)
    return TrashOut(entries=[TrashEntryOut(**trash.describe_entry(e, context.settings))
                             for e in entries])  # fmt: skip


@router.post("/projects/{name}/trash/{entry_id}/restore")
def restore_from_trash(
    name: ProjectInPath,
    entry_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    caller: CallerDep,
    context: ContextDep,
) -> dict[str, Any]:
    """Move a trashed run back to where it was (409 if something is there again); a
    registered run is `present` again. The same as `tbhub admin trash restore <id>`."""
    require_project(context.access, caller, name, Role.editor)
    entry = trash.restore_in_project(
        context.factory, context.settings, project=name, entry_id=entry_id, actor=caller.name
    )
    return {"id": entry.id, "project": entry.project, "run_path": entry.run_path,
            "restored": True}  # fmt: skip
