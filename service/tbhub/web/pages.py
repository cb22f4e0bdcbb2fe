"""Server-rendered pages: sign-in and sign-out (the projects page is web/projects.py)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from tbhub.auth.user_sessions import end_session
from tbhub.core.bounds import PASSWORD_MAX, TOKEN_MAX, URL_PATH_MAX, USER_NAME_MAX
from tbhub.core.db import transaction
from tbhub.core.errors import Forbidden, NotAuthenticated
from tbhub.core.models import User
from tbhub.domain import audit
from tbhub.domain.users import authenticate
from tbhub.http.deps import (
    AppContext,
    ContextDep,
    OptionalUser,
    SessionDep,
    client_address,
    set_session_cookie,
    signed_in_session,
)
from tbhub.web.render import check_form_token, page

router = APIRouter(include_in_schema=False)
log = logging.getLogger("tbhub")


def safe_next(target: str | None) -> str:
    """Redirect only to a local path: never to another host (`//evil`, `/\\evil`, `https:`).
    Browsers drop tabs and newlines from URLs ("/<tab>/evil" becomes "//evil"), so any control
    character or whitespace makes the target refused too."""
    if (
        not target
        or not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target)
    ):
        return "/"
    return target


@router.get("/auth/login")
def login_form(
    request: Request,
    context: ContextDep,
    next: Annotated[str, Query(max_length=URL_PATH_MAX)] = "/",
) -> Response:
    return page(request, "login.html", login_page(context, safe_next(next)))


def login_page(context: AppContext, next_path: str, error: str | None = None) -> dict[str, Any]:
    settings = context.settings
    return {
        "next": next_path,
        "error": error,
        "local_login": settings.local_login,
        "oidc_name": settings.oidc_provider_name if context.oidc is not None else None,
    }


@router.post("/auth/login")
def login(
    request: Request,
    context: ContextDep,
    session: SessionDep,
    username: Annotated[str, Form(max_length=USER_NAME_MAX)],
    password: Annotated[str, Form(max_length=PASSWORD_MAX)],
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
    next: Annotated[str, Form(max_length=URL_PATH_MAX)] = "/",
) -> Response:
    if not context.settings.local_login:
        raise Forbidden(
            "local accounts are turned off here; sign in with your organisation's account"
        )
    check_form_token(request, csrf_token, "sign-in")
    address = client_address(request)
    wait = context.sign_ins.wait_seconds(username, address)
    if wait > 0:
        log.warning("sign-in refused for %r from %s: throttled for %.0fs", username, address, wait)
        minutes = f"{wait / 60:.0f} minutes" if wait >= 120 else f"{wait:.0f} seconds"
        values = login_page(context, safe_next(next), f"too many failed sign-ins from your "
                            f"address; try again in {minutes}")  # fmt: skip
        response = page(request, "login.html", values, status_code=429)
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    context.sign_ins.hold(username)  # an account failing from many addresses: a delay
    try:
        user = authenticate(session, name=username, password=password)
    except NotAuthenticated as exc:
        context.sign_ins.failed(username, address)
        audit.record(session, actor="anonymous", action="auth.sign_in_failed", target=username,
                     address=address, method="local")  # fmt: skip
        log.warning("sign-in refused for %r from %s: wrong name or password", username, address)
        values = login_page(context, safe_next(next), exc.message)
        return page(request, "login.html", values, status_code=401)
    context.sign_ins.succeeded(username, address)
    audit.record(session, actor=user.name, action="auth.sign_in", target=user.name,
                 address=address, method="local")  # fmt: skip
    return signed_in_redirect(context, session, user, safe_next(next))


def signed_in_redirect(context: AppContext, session: Session, user: User, target: str) -> Response:
    """The answer to a successful sign-in, by password or OIDC: a new session (its row and
    its cookie), and on."""
    response = RedirectResponse(target, status_code=303)
    set_session_cookie(response, context, user, session)
    return response


@router.get("/auth/logout")
def logout_page(request: Request, user: OptionalUser) -> Response:
    """Sign-out as a page: where a board on its own origin sends its bar's "Sign out"."""
    if user is None:
        return RedirectResponse("/auth/login", status_code=303)
    return page(request, "logout.html", {}, user=user)


@router.post("/auth/logout")
def logout(
    request: Request,
    context: ContextDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "sign-out")
    signed_in = signed_in_session(request, context)
    if signed_in is not None:
        # Ends on the server: a copy of the cookie, and the board cookies made from this
        # session, are refused from now on (the other devices' sessions go on).
        with transaction(context.factory) as session:
            end_session(session, signed_in.session_id)
        context.sessions.invalidate()
    response = RedirectResponse("/auth/login", status_code=303)
    response.delete_cookie(context.cookies.session, path="/")
    return response
