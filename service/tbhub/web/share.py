"""/share/<token>: open a share link; the board it names, and nothing else, opens to it."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Path
from fastapi.responses import RedirectResponse, Response

from tbhub.auth.share_links import SHARE_COOKIE, TOKEN_LENGTH
from tbhub.core.errors import NotFound
from tbhub.http.deps import ContextDep
from tbhub.supervisor.plan import board_prefix

router = APIRouter(include_in_schema=False)


@router.get("/share/{token}")
def open_share_link(
    token: Annotated[str, Path(max_length=TOKEN_LENGTH)], context: ContextDep
) -> Response:
    grant = context.shares.lookup(token)
    if grant is None:
        raise NotFound(
            "this share link has expired or was revoked; ask whoever sent it for a new one"
        )
    prefix = board_prefix(grant.project)
    if context.board_origins is not None:  # the cookie must be the board origin's own
        query = urlencode({"share": token, "next": f"{prefix}/"})
        return RedirectResponse(
            context.board_origins.url(grant.project, f"/_tbhub/enter?{query}"), status_code=303
        )
    response = RedirectResponse(f"{prefix}/", status_code=303)
    response.set_cookie(
        SHARE_COOKIE,
        token,
        max_age=max(1, int(grant.expires_at - time.time())),
        httponly=True,
        samesite="lax",
        secure=context.settings.public_url.startswith("https://"),
        path=f"{prefix}/",  # this board only: never sent to the API, the UI or another board
    )
    return response
