"""/api/v1 retention policies: read and set by instance admins and project owners."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from tbhub.auth.permissions import load_access
from tbhub.bounds import ByteCount, Count, Days, Minutes, RunPath
from tbhub.deps import ContextDep, CurrentUser, ProjectInPath, RunPathInPath, SessionDep
from tbhub.errors import Forbidden, NotFound
from tbhub.jobs import retention
from tbhub.models import Role, User
from tbhub.names import check_project_name

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


def require_owner(session: Session, user: User, project: str) -> None:
    """Owners of the project and instance admins; others see 404 (not a member) or 403."""
    check_project_name(project)
    access = load_access(session, user_id=user.id, project=project)
    if not access.can_view:
        raise NotFound(f"no project named {project!r} that you can see; list yours with "
                       "GET /api/v1/projects")  # fmt: skip
    if not access.at_least(Role.owner):
        raise Forbidden(f"only owners of {project} and instance admins manage its retention")


@router.get("/retention/default")
def get_default(user: CurrentUser, context: ContextDep) -> dict[str, Any]:
    """The global default policy (from the settings)."""
    if not user.is_admin:
        raise Forbidden("only instance admins see the global retention default")
    return retention.default_policy(context.settings).as_dict()


@router.get("/projects/{name}/retention")
def get_policy(
    name: ProjectInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The effective policy, the project's overrides, the default and the pinned runs."""
    require_owner(session, user, name)
    return retention.describe_policy(session, context.settings, project=name)


@router.put("/projects/{name}/retention")
def set_policy(
    name: ProjectInPath, body: PolicyIn, user: CurrentUser, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    require_owner(session, user, name)
    values = body.model_dump(exclude_unset=True)
    retention.set_override(session, project=name, values=values, actor=user.name)
    return retention.describe_policy(session, context.settings, project=name)


@router.post("/projects/{name}/retention/pins", status_code=201)
def pin(
    name: ProjectInPath, body: PinIn, user: CurrentUser, session: SessionDep, context: ContextDep
) -> dict[str, str]:
    """Exempt a run that exists from retention (404, naming similar runs, if it does not)."""
    require_owner(session, user, name)
    retention.pin_run(session, context.settings, project=name, run_path=body.run, actor=user.name)
    return {"project": name, "run": body.run}


@router.delete("/projects/{name}/retention/pins/{run:path}", status_code=204)
def unpin(name: ProjectInPath, run: RunPathInPath, user: CurrentUser, session: SessionDep) -> None:
    require_owner(session, user, name)
    retention.unpin_run(session, project=name, run_path=run, actor=user.name)


@router.get("/projects/{name}/retention/plan")
def plan(
    name: ProjectInPath, user: CurrentUser, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The dry run for this project: what `tbhub admin retention apply` would remove now."""
    require_owner(session, user, name)
    [project_plan] = retention.plan_retention(context.factory, context.settings, project=name)
    return project_plan.summary()
