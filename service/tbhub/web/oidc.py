"""Sign-in through the configured OpenID provider: /auth/oidc/login and its callback."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from tbhub.auth.oidc import PENDING_COOKIE, PENDING_MAX_AGE, OidcClient, PendingSigner
from tbhub.core.bounds import URL_PATH_MAX
from tbhub.core.errors import NotFound
from tbhub.domain.teams import sync_groups
from tbhub.domain.users import sign_in_with_identity
from tbhub.http.deps import AppContext, ContextDep, SessionDep
from tbhub.web.pages import safe_next, signed_in_redirect

router = APIRouter(include_in_schema=False)
CALLBACK_PATH = "/auth/oidc/callback"


def _client(context: AppContext) -> OidcClient:
    if context.oidc is None:
        raise NotFound("sign-in with an identity provider is not set up here; use /auth/login")
    return context.oidc


def _pending_signer(context: AppContext) -> PendingSigner:
    assert context.settings.secret_key is not None
    return PendingSigner(context.settings.secret_key.get_secret_value())


def _redirect_uri(context: AppContext) -> str:
    return context.settings.public_url.rstrip("/") + CALLBACK_PATH


@router.get("/auth/oidc/login")
def oidc_login(
    context: ContextDep, next: Annotated[str, Query(max_length=URL_PATH_MAX)] = "/"
) -> Response:
    url, pending = _client(context).begin(_redirect_uri(context), safe_next(next))
    response = RedirectResponse(url, status_code=302)
    response.set_cookie(
        PENDING_COOKIE,
        _pending_signer(context).dump(pending),
        max_age=PENDING_MAX_AGE,
        httponly=True,
        samesite="lax",  # sent on the provider's top-level redirect back to us
        secure=context.settings.public_url.startswith("https://"),
        path="/auth/oidc/",
    )
    return response


@router.get(CALLBACK_PATH)
def oidc_callback(
    request: Request,
    context: ContextDep,
    session: SessionDep,
    state: Annotated[str, Query(max_length=512)] = "",
    code: Annotated[str, Query(max_length=4096)] = "",
    error: Annotated[str, Query(max_length=256)] = "",
    error_description: Annotated[str, Query(max_length=1024)] = "",
) -> Response:
    pending = _pending_signer(context).load(request.cookies.get(PENDING_COOKIE))
    params = {"state": state, "code": code}
    if error:
        params.update(error=error, error_description=error_description)
    identity = _client(context).finish(_redirect_uri(context), pending, params)
    user = sign_in_with_identity(session, identity=identity)
    if context.settings.oidc_group_teams:
        sync_groups(session, user=user, groups=identity.groups,
                    group_teams=context.settings.oidc_group_teams)  # fmt: skip
        context.invalidate(context.access, after=session)
    assert pending is not None
    response = signed_in_redirect(context, session, user, safe_next(pending.next))
    # The pending login is used up: a replayed callback finds no state to match.
    response.delete_cookie(PENDING_COOKIE, path="/auth/oidc/")
    return response
