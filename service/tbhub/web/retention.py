"""/projects/<p>/retention: the project's retention policy and overrides, its pinned runs and
the dry-run plan (owners), and its trash with restore buttons (viewers see it, editors
restore). The same roles and service functions as the API (api/retention.py): jobs/
retention.py for policies, pins and the plan, jobs/trash.py for the trash; they write the
audit events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, ProjectAccess, require_project
from tbhub.core.bounds import DAYS_MAX, INT32_MAX, INT64_MAX, MINUTES_MAX, TOKEN_MAX, RunPath
from tbhub.core.errors import TbhubError
from tbhub.core.models import Role, User
from tbhub.housekeeping import retention, trash
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.web.render import WebUser, attempt, check_form_token, done, form_page

router = APIRouter(include_in_schema=False)

GIB = 2**30
SHOWN_PLAN_RUNS = 200  # the API and `tbhub admin retention plan --json` list every one
CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]


def _access(context: AppContext, user: User, project: str, need: Role) -> ProjectAccess:
    return require_project(context.access, Caller.of_user(user), project, need)


def _act(
    request: Request, session: Session, context: AppContext, user: User, project: str, *,
    csrf_token: str, what: str, need: Role, action: Callable[[Session], object], notice: str,
) -> Response:  # fmt: skip
    """Every form here: its token, the role the API asks for the same action, the action;
    back to the page."""
    check_form_token(request, csrf_token, what)
    access = _access(context, user, project, need)
    result = attempt(context.factory, action)
    if isinstance(result, TbhubError):
        return _show(request, session, context, user, access, error=result)
    return done(f"/projects/{project}/retention", notice)


def _show(
    request: Request, session: Session, context: AppContext, user: User, access: ProjectAccess,
    *, error: TbhubError | None = None,
) -> Response:  # fmt: skip
    project = access.name
    is_owner = access.role == Role.owner
    values: dict[str, Any] = {
        "project": project,
        "tab": "retention",
        "is_owner": is_owner,
        "can_restore": access.role.rank >= Role.editor.rank,
        "trash": [
            trash.describe_entry(e, context.settings)
            for e in trash.project_trash(session, project=project)
        ],
        "grace_days": context.settings.trash_grace_days,
        "gib": GIB,
        "shown_plan_runs": SHOWN_PLAN_RUNS,
    }
    if is_owner:
        values["policy"] = retention.describe_policy(session, context.settings, project=project)
        [values["plan"]] = retention.plan_retention(context.factory, context.settings,
                                                    project=project)  # fmt: skip
    return form_page(request, "retention.html", values, user=user, error=error)


@router.get("/projects/{name}/retention")
def retention_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    access = _access(context, user, name, Role.viewer)
    return _show(request, session, context, user, access)


@router.post("/projects/{name}/retention")
def save_policy(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    max_age_days: Annotated[float | None, Form(ge=0, le=DAYS_MAX, allow_inf_nan=False)] = None,
    keep_last: Annotated[int | None, Form(ge=0, le=INT32_MAX)] = None,
    max_project_gib: Annotated[
        float | None, Form(ge=0, le=INT64_MAX // GIB, allow_inf_nan=False)
    ] = None,
    action: Annotated[str, Form(max_length=16)] = "",
    active_minutes: Annotated[float | None, Form(ge=0, le=MINUTES_MAX, allow_inf_nan=False)] = None,
    csrf_token: CsrfField = "",
) -> Response:
    """The whole set of overrides at once: a field left empty inherits the global default."""
    values = {
        "max_age_days": max_age_days,
        "keep_last": keep_last,
        "max_project_bytes": None if max_project_gib is None else round(max_project_gib * GIB),
        "action": action or None,
        "active_minutes": active_minutes,
    }
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="retention policy",
        need=Role.owner, notice="policy_saved",
        action=lambda tx: retention.set_override(tx, project=name, values=values,
                                                 actor=user.name),
    )  # fmt: skip


@router.post("/projects/{name}/retention/pins")
def pin(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep,
    context: ContextDep, run: Annotated[RunPath, Form()], csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="pin run",
        need=Role.editor, notice="run_pinned",
        action=lambda tx: retention.pin_run(tx, context.settings, project=name, run_path=run,
                                            actor=user.name),
    )  # fmt: skip


@router.post("/projects/{name}/retention/pins/remove")
def unpin(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep,
    context: ContextDep, run: Annotated[RunPath, Form()], csrf_token: CsrfField = "",
) -> Response:  # fmt: skip
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="unpin run",
        need=Role.editor, notice="run_unpinned",
        action=lambda tx: retention.unpin_run(tx, project=name, run_path=run, actor=user.name),
    )  # fmt: skip


@router.post("/projects/{name}/trash/{entry_id}/restore")
def restore(
    request: Request,
    name: ProjectInPath,
    entry_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: CsrfField = "",
) -> Response:
    # The trash journal commits each of its steps itself; the action's session stays unused.
    return _act(
        request, session, context, user, name, csrf_token=csrf_token, what="restore",
        need=Role.editor, notice="restored",
        action=lambda _tx: trash.restore_in_project(context.factory, context.settings,
                                                    project=name, entry_id=entry_id,
                                                    actor=user.name),
    )  # fmt: skip
