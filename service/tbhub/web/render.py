"""What every server-rendered page shares: the signed-in user for the header, the CSRF token
its forms carry, notices after an action, and the sign-in redirect for signed-out readers.

Pages are rendered with `page()`; a form's POST handler checks its token with
`check_form_token()` and answers with `done()` (a 303 back to a page, with a notice key)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.caller import Caller, ProjectAccess, require_project
from tbhub.core.db import transaction
from tbhub.core.errors import (
    AmbiguousSession,
    Forbidden,
    InvalidInput,
    NotAuthenticated,
    TbhubError,
)
from tbhub.core.models import Role, User
from tbhub.http.csrf import binding_of, new_nonce
from tbhub.http.deps import AppContext, OptionalUser, get_optional_user
from tbhub.http.templating import render

# Notices a page shows after an action, by key: the query string names one, never the text,
# so a link cannot make tbhub's page say what its author wants.
T = TypeVar("T")

NOTICES = {
    "project_created": "Project created.",
    "member_added": "Member added.",
    "member_removed": "Member removed.",
    "member_role_set": "Role saved.",
    "team_role_set": "Team role saved.",
    "team_role_removed": "Team role removed.",
    "token_revoked": "Token revoked.",
    "share_revoked": "Share link revoked.",
    "dashboards_restricted": "Dashboard restriction saved: it applies to open boards within "
    "about 15 seconds.",
    "run_pinned": "Run pinned: retention will keep it.",
    "run_unpinned": "Run unpinned.",
    "restored": "Restored from the trash.",
    "policy_saved": "Retention policy saved.",
    "board_restarting": "The board is being replaced; readers are not cut off.",
    "board_stopping": "The board stops as soon as nobody reads it.",
    "board_pinned": "Board pinned: it is never stopped for being idle.",
    "board_unpinned": "Board unpinned.",
    "plugin_on": "Plugin turned on: the board is being replaced with it; reload the board once "
    "it is live.",
    "plugin_off": "Plugin turned off: the board is being replaced without it.",
    "user_created": "User created.",
    "user_updated": "User saved.",
    "compare_deleted": "Compare board deleted; its board stops.",
    "view_deleted": "View deleted; its board stops.",
    "incident_resolved": "Incident resolved.",
    "rule_saved": "Rule saved.",
    "channel_added": "Channel added.",
    "channel_enabled": "Channel switched on.",
    "channel_disabled": "Channel switched off: nothing is sent to it.",
    "channel_deleted": "Channel deleted.",
    "test_sent": "Test message delivered.",
    "test_failed": "The test message was not delivered; the channel shows why.",
    "email_saved": "Email preference saved.",
    "email_removed": "No more email from this project.",
}


def web_user(user: OptionalUser) -> User:
    """The signed-in user of a page; a signed-out browser is sent to sign in and back."""
    if user is None:
        raise NotAuthenticated("sign in to see this page")
    return user


WebUser = Annotated[User, Depends(web_user)]


def caller_of(user: User) -> Caller:
    """A page's signed-in user as the caller the permission checks (auth/caller.py) take."""
    return Caller(user_id=user.id, name=user.name, is_admin=user.is_admin)


def page(
    request: Request,
    name: str,
    context: dict[str, Any],
    *,
    user: User | None = None,
    status_code: int = 200,
) -> Response:
    """Render a page with the header's user, its notice and the CSRF token of this session
    (or, before sign-in, of a nonce cookie set here) for its forms."""
    app: AppContext = request.app.state.context
    binding = binding_of(request, app.cookies)
    nonce = None if binding else new_nonce()
    token = app.csrf.token(binding or nonce or "")
    notice = NOTICES.get(request.query_params.get("notice", ""))
    values = {"user": user, "notice": notice, **context, "csrf_token": token}
    response = render(request, name, values, status_code=status_code)
    if nonce is not None:
        secure = app.settings.public_url.startswith("https://")
        response.set_cookie(app.cookies.csrf, nonce, httponly=True, samesite="strict",
                            secure=secure)  # fmt: skip
    return response


def form_page(
    request: Request, name: str, context: dict[str, Any], *, user: User,
    error: TbhubError | None = None, secret_shown: bool = False,
) -> Response:  # fmt: skip
    """A page of forms: after a refused action, its reason (`error` in the template) with the
    error's status; a page that shows a new secret once is never stored by the browser."""
    status = error.http_status if error is not None else 200
    response = page(request, name, {**context, "error": error.message if error else None},
                    user=user, status_code=status)  # fmt: skip
    if secret_shown:
        response.headers["Cache-Control"] = "no-store"
    return response


def header_user(request: Request) -> User | None:
    """The signed-in user for a page rendered outside a route (an error page): the cookie is
    checked first, so only a signed-in browser costs one read by primary key; None when
    there is no current session or the database cannot answer."""
    app: AppContext = request.app.state.context
    try:
        with app.factory() as session:
            user = get_optional_user(request, app, session)
            if user is not None:
                session.expunge(user)
            return user
    except (AmbiguousSession, SQLAlchemyError):
        return None


def error_page(request: Request, status: int, context: dict[str, Any]) -> Response:
    """An error page that keeps the signed-in header (http_errors.py calls it)."""
    return page(request, "error.html", context, user=header_user(request), status_code=status)


def check_form_token(request: Request, token: str, what: str) -> None:
    app: AppContext = request.app.state.context
    if not app.csrf.valid(binding_of(request, app.cookies), token):
        raise Forbidden(f"the {what} form expired; reload the page and try again")


def done(path: str, notice: str) -> Response:
    """After a form's action: back to a page (303, so a reload does not repeat it)."""
    if notice not in NOTICES:
        raise ValueError(f"unknown notice {notice!r}")
    path, hash_mark, fragment = path.partition("#")  # the notice goes before a fragment
    separator = "&" if "?" in path else "?"
    target = f"{path}{separator}{urlencode({'notice': notice})}{hash_mark}{fragment}"
    return RedirectResponse(target, status_code=303)


def attempt(factory: sessionmaker[Session], action: Callable[[Session], T]) -> T | TbhubError:
    """A form's action, in a transaction of its own: committed before the answer, or, when
    the service refuses it, rolled back whole and its error returned for the page to show
    (the page is then read afresh, so it shows nothing of the refused change)."""
    try:
        with transaction(factory) as session:
            return action(session)
    except TbhubError as exc:
        return exc


def project_form(
    request: Request, user: User, project: str, *, csrf_token: str, what: str, need: Role,
    action: Callable[[ProjectAccess, Session], object], back: str, notice: str,
    refused: Callable[[ProjectAccess, TbhubError], Response],
) -> Response:  # fmt: skip
    """A project page's form: its token, the role the API asks for the same action, the
    action (`attempt`); back to `back` with the notice, or, refused, `refused` shows why."""
    check_form_token(request, csrf_token, what)
    app: AppContext = request.app.state.context
    access = require_project(app.access, caller_of(user), project, need)
    result = attempt(app.factory, lambda session: action(access, session))
    if isinstance(result, TbhubError):
        return refused(access, result)
    return done(back, notice)


def chosen(
    choice: str, custom: float | None, choices: Mapping[str, float | None], what: str
) -> float | None:
    """A form's <select> of preset values with a "custom" option that reads a number field."""
    if choice == "custom":
        if custom is None:
            raise InvalidInput(f"give the custom {what}, or pick one of the choices")
        return custom
    if choice not in choices:
        raise InvalidInput(f"{what} {choice!r} is not one of: {', '.join(choices)}, custom")
    return choices[choice]
