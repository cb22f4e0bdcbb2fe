"""/projects/<p>/share: read-only links to the project's board: create one with an expiry
(its URL is shown this once), list them, revoke; owners only, as on
/api/v1/projects/<p>/share-links, through the same service functions (auth/share_links.py),
which write the audit events. /share/<token>, the link itself, is web/share.py.

The same page holds the owner's toggle for the dashboards kept from viewers and share links
(domain/dashboards.py), saved through the board settings service like PUT .../board/settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from pydantic import StringConstraints
from sqlalchemy.orm import Session

from tbhub.auth import share_links
from tbhub.auth.caller import Caller, require_project
from tbhub.core.bounds import INT32_MAX, SHORT_TEXT_MAX, TOKEN_MAX
from tbhub.core.errors import TbhubError
from tbhub.core.models import BoardSettings, Role, User
from tbhub.domain.dashboards import AUDIENCES, DASHBOARDS, DEFAULT_AUDIENCE, SUGGESTED
from tbhub.domain.projects import get_project
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.supervisor.board_settings import UNSET, SettingsChange, settings_dict, update_settings
from tbhub.web.render import WebUser, attempt, check_form_token, chosen, done, form_page

router = APIRouter(include_in_schema=False)

# The expiry choices the form offers, in hours ("custom" reads the days field).
EXPIRY_HOURS: dict[str, float | None] = {"1": 1.0, "24": 24.0, "168": 168.0, "720": 720.0}


def _require_owner(context: AppContext, user: User, project: str) -> None:
    require_project(context.access, Caller.of_user(user), project, Role.owner)


def _show(
    request: Request, session: Session, context: AppContext, user: User, project: str, *,
    created: dict[str, Any] | None = None, error: TbhubError | None = None,
    form: dict[str, Any] | None = None,
) -> Response:  # fmt: skip
    values = {
        "project": project,
        "tab": "share",
        "is_owner": True,  # only owners get here
        "links": [
            {**share_links.describe(k), "row": k}
            for k in share_links.list_links(session, project=project)
        ],
        "created": created,
        "form": form or {"expires": "168"},
        "max_days": share_links.MAX_DAYS,
        "restriction": _restriction(session, project),
    }
    # The link's secret is on this page.
    return form_page(
        request, "share_links.html", values, user=user, error=error, secret_shown=bool(created)
    )


@router.get("/projects/{name}/share")
def share_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    _require_owner(context, user, name)
    return _show(request, session, context, user, name)


@router.post("/projects/{name}/share")
def create(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    expires: Annotated[str, Form(max_length=16)] = "168",
    custom_days: Annotated[
        float | None, Form(gt=0, le=share_links.MAX_DAYS, allow_inf_nan=False)
    ] = None,
    note: Annotated[str, Form(max_length=SHORT_TEXT_MAX)] = "",
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "new share link")
    _require_owner(context, user, name)

    def make(tx: Session) -> dict[str, Any]:
        custom_hours = None if custom_days is None else custom_days * 24
        hours = chosen(expires, custom_hours, EXPIRY_HOURS, "expiry in days")
        assert hours is not None  # every choice is a number of hours
        link, token = share_links.create_link(
            tx, project=name, expires_in=timedelta(hours=hours), note=note.strip() or None,
            actor=user.name,
        )  # fmt: skip
        url = f"{context.settings.public_url}/share/{token}"
        return {**share_links.describe(link), "row": link, "url": url}

    created = attempt(context.factory, make)
    if isinstance(created, TbhubError):
        form = {"expires": expires, "custom_days": custom_days, "note": note}
        return _show(request, session, context, user, name, error=created, form=form)
    return _show(request, session, context, user, name, created=created)


def _restriction(session: Session, project: str) -> dict[str, Any]:
    own = settings_dict(session.get(BoardSettings, get_project(session, name=project).id))
    restricted = own["restricted_dashboards"]
    return {
        "dashboards": restricted,
        "audience": own["restricted_audience"],
        # Nothing restricted yet: the form offers the suggested set, ticked.
        "ticked": set(restricted or SUGGESTED),
        "available": sorted(DASHBOARDS),
        "audiences": AUDIENCES,
    }


@router.post("/projects/{name}/share/dashboards")
def restrict_dashboards(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    dashboard: Annotated[
        list[Annotated[str, StringConstraints(max_length=64)]], Form(max_length=len(DASHBOARDS))
    ] = [],  # noqa: B006
    audience: Annotated[str, Form(max_length=16)] = DEFAULT_AUDIENCE,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    """Save the restricted dashboards (none ticked: the restriction is lifted)."""
    check_form_token(request, csrf_token, "restrict dashboards")
    _require_owner(context, user, name)
    change = SettingsChange(
        **{**dict.fromkeys(SettingsChange.__dataclass_fields__, UNSET),
           "restricted_dashboards": dashboard, "restricted_audience": audience}
    )  # fmt: skip
    saved = attempt(context.factory, lambda tx: update_settings(
        tx, project=name, change=change, actor=user.name, now=datetime.now(UTC),
        backend=context.settings.board_backend))  # fmt: skip
    if isinstance(saved, TbhubError):
        return _show(request, session, context, user, name, error=saved)
    context.restrictions.invalidate()
    return done(f"/projects/{name}/share#dashboards-heading", "dashboards_restricted")


@router.post("/projects/{name}/share/{link_id}/revoke")
def revoke(
    request: Request,
    name: ProjectInPath,
    link_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "revoke share link")
    _require_owner(context, user, name)
    share_links.revoke_link(session, project=name, link_id=link_id, actor=user.name)
    context.invalidate(context.shares, after=session)
    return done(f"/projects/{name}/share", "share_revoked")
