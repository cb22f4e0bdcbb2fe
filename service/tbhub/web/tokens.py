"""/settings/tokens: the signed-in user's own API tokens: create one (its secret is shown this
once), see each one's last use, revoke.

The same service functions as POST/GET/DELETE /api/v1/tokens (auth/tokens.py), which check
that a token never exceeds its user's role and write the audit events. A new token is
committed in its own transaction before its secret is shown."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from pydantic import Field
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, require_token_manager
from tbhub.auth.tokens import (
    MAX_TOKEN_DAYS,
    MIN_TOKEN_DAYS,
    create_token,
    expiry_from_days,
    get_token,
    list_tokens,
    revoke_token,
)
from tbhub.core.bounds import INT64_MAX, PROJECT_NAME_MAX, TOKEN_MAX, TokenName
from tbhub.core.errors import TbhubError
from tbhub.core.models import Role, TokenScope, User
from tbhub.domain.projects import visible_projects
from tbhub.http.deps import AppContext, ContextDep, SessionDep
from tbhub.web.render import WebUser, attempt, check_form_token, chosen, done, form_page

router = APIRouter(include_in_schema=False)

# The expiry choices the form offers, in days ("custom" reads the number field).
EXPIRY_CHOICES: dict[str, float | None] = {
    "never": None,
    "1": 1.0,
    "7": 7.0,
    "30": 30.0,
    "90": 90.0,
    "365": 365.0,
}


def _show(
    request: Request, session: Session, context: AppContext, user: User, *,
    created: dict[str, Any] | None = None, error: TbhubError | None = None,
    form: dict[str, Any] | None = None,
) -> Response:  # fmt: skip
    projects = [
        {"name": p.name, "role": role.value if role else "admin",
         "can_write": role is None or role.rank >= Role.editor.rank}
        for p, role in visible_projects(session, user=user)
    ]  # fmt: skip
    values = {
        "tokens": list_tokens(session, user_id=user.id),
        "projects": projects,
        "created": created,
        "public_url": context.settings.public_url,
        "form": form or {"scope": "write", "expires": "90", "projects": []},
        "min_days": MIN_TOKEN_DAYS,
        "max_days": MAX_TOKEN_DAYS,
        "now": datetime.now(UTC),
    }
    # The secret is on this page: never keep a copy of it anywhere.
    return form_page(
        request, "tokens.html", values, user=user, error=error, secret_shown=bool(created)
    )


@router.get("/settings/tokens")
def tokens_page(
    request: Request, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    # Last-use times this process still holds in memory, written first so the list is
    # current. Only here: a form's handler holds a write transaction this would wait on.
    context.tokens.flush()
    return _show(request, session, context, user)


@router.post("/settings/tokens")
def create(
    request: Request,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    name: Annotated[TokenName, Form()],
    scope: Annotated[TokenScope, Form()],
    projects: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=PROJECT_NAME_MAX)]],
        Form(max_length=100),
    ] = [],  # noqa: B006 - FastAPI copies defaults
    expires: Annotated[str, Form(max_length=16)] = "never",
    custom_days: Annotated[
        float | None, Form(ge=MIN_TOKEN_DAYS, le=MAX_TOKEN_DAYS, allow_inf_nan=False)
    ] = None,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "new token")

    def mint(tx: Session) -> dict[str, Any]:
        days = chosen(expires, custom_days, EXPIRY_CHOICES, "expiry in days")
        token, secret = create_token(
            tx, user=tx.get_one(User, user.id), name=name, scope=scope, projects=projects,
            expires_at=expiry_from_days(days, datetime.now(UTC)), actor=user.name,
        )  # fmt: skip
        return {"secret": secret, "name": token.name, "projects": [p.name for p in token.projects]}

    created = attempt(context.factory, mint)
    if isinstance(created, TbhubError):
        form = {"name": name, "scope": scope.value, "projects": projects, "expires": expires,
                "custom_days": custom_days}  # fmt: skip
        return _show(request, session, context, user, error=created, form=form)
    return _show(request, session, context, user, created=created)


@router.post("/settings/tokens/{token_id}/revoke")
def revoke(
    request: Request,
    token_id: Annotated[int, Path(ge=1, le=INT64_MAX)],
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "revoke token")
    token = get_token(session, token_id)
    require_token_manager(context.access, Caller.of_user(user), token)
    revoke_token(session, token=token, actor=user.name)
    context.invalidate(context.tokens, after=session)
    return done("/settings/tokens", "token_revoked")
