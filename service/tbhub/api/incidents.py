"""/api/v1 run-health incidents of a project: members read them, editors resolve them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from tbhub.auth.caller import require_project
from tbhub.core.bounds import INT32_MAX, RUN_PATH_MAX
from tbhub.core.models import Role
from tbhub.domain import audit
from tbhub.health import incidents
from tbhub.health.rules import DETECTORS
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["health"])
Detector = Literal[DETECTORS]  # type: ignore[valid-type]


@router.get("/projects/{name}/incidents")
def list_incidents(
    name: ProjectInPath,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
    run: Annotated[
        str | None,
        Query(min_length=1, max_length=RUN_PATH_MAX, description="Only this run (its path)."),
    ] = None,
    detector: Annotated[Detector | None, Query(description="Only this detector.")] = None,
    open: Annotated[bool | None, Query(description="true: open only; false: resolved only")] = None,
    before_id: Annotated[
        int | None, Query(ge=1, le=INT32_MAX, description="Older than this id (paging).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """The project's incidents, newest first, and how many are open."""
    project = require_project(context.access, caller, name, Role.viewer)
    rows = incidents.list_incidents(session, project_id=project.project_id, run_path=run,
                                    detector=detector, open_only=open, before_id=before_id,
                                    limit=limit)  # fmt: skip
    return {
        "incidents": [incidents.incident_json(row, name) for row in rows],
        "open": incidents.open_count(session, project_id=project.project_id),
    }


@router.post("/projects/{name}/incidents/{incident_id}/resolve")
def resolve_incident(
    name: ProjectInPath,
    incident_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:
    """Mark an incident resolved (editors and owners); resolving it again changes nothing."""
    project = require_project(context.access, caller, name, Role.editor)
    row, was_open = incidents.resolve(session, project_id=project.project_id,
                                      incident_id=incident_id, actor=caller.name)  # fmt: skip
    if was_open:
        target = f"{name}/{row.run_path}"
        audit.record(session, actor=caller.name, action="incident.resolve", target=target,
                     incident=row.id, detector=row.detector)  # fmt: skip
    return incidents.incident_json(row, name)
