"""/settings/email: which projects' incidents reach the signed-in user by email, of which
kinds, or only on the runs they registered. The same service functions and checks as
PUT/DELETE /api/v1/projects/<p>/email-preference (health/notify/channels.py): a user sets
only their own, and only for a project they may read."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess
from tbhub.core.bounds import TOKEN_MAX
from tbhub.core.errors import TbhubError
from tbhub.core.models import Role, User
from tbhub.domain.projects import visible_projects
from tbhub.health.notify import channels
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.web.health import LABELS, KindsField
from tbhub.web.render import WebUser, form_page, project_form

router = APIRouter(include_in_schema=False)

CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]
PAGE = "/settings/email"


def _show(
    request: Request, session: Session, context: AppContext, user: User, *,
    error: TbhubError | None = None, failed: str | None = None,
) -> Response:  # fmt: skip
    chosen = {p["project"]: p for p in channels.list_preferences(session, user_id=user.id)}
    names = [project.name for project, _ in visible_projects(session, user=user)]
    values = {
        "projects": [(name, chosen.get(name)) for name in names],
        "email_on": bool(context.settings.notify_smtp_host),
        "account_email": user.email,
        "detectors": [(d, LABELS.get(d, d)) for d in channels.DETECTORS],
        "failed": failed,
    }
    return form_page(request, "email.html", values, user=user, error=error)


@router.get(PAGE)
def email_page(
    request: Request, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    return _show(request, session, context, user)


@router.post(PAGE + "/{name}")
def save_preference(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    action: Annotated[Literal["save", "stop"], Form()] = "save",
    address: Annotated[str, Form(max_length=channels.EMAIL_MAX)] = "",
    detectors: KindsField = [],  # noqa: B006 - FastAPI copies a default
    own_runs_only: Annotated[bool, Form()] = False,
    csrf_token: CsrfField = "",
) -> Response:
    """Email from this project (`save`), or no more (`stop`)."""

    def run(_access: ProjectAccess, tx: Session) -> object:
        if action == "stop":
            return channels.delete_preference(tx, user_id=user.id, project=name)
        return channels.set_preference(tx, context.settings, user_id=user.id, project=name,
                                       address=address.strip() or None, detectors=detectors,
                                       own_runs_only=own_runs_only)  # fmt: skip

    return project_form(
        request, user, name, csrf_token=csrf_token, what="email preference", need=Role.viewer,
        action=run, back=PAGE, notice="email_removed" if action == "stop" else "email_saved",
        refused=lambda _access, error: _show(request, session, context, user, error=error,
                                             failed=name),
    )  # fmt: skip
