"""Crossing to a board's own origin (auth/board_origin.py): tbhub's origin hands a signed-in
member a short pass; the board origin turns it (or a share link) into its own cookie."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from tbhub.auth.board_origin import PASS_SECONDS, BoardOrigins
from tbhub.auth.compare_access import may_open
from tbhub.auth.share_links import SHARE_COOKIE, TOKEN_LENGTH
from tbhub.core.bounds import TOKEN_MAX, URL_PATH_MAX
from tbhub.core.errors import Forbidden, NotFound
from tbhub.core.names import check_project_name
from tbhub.http.deps import AppContext, ContextDep, OptionalUser, signed_in_session
from tbhub.supervisor.plan import board_prefix
from tbhub.web.pages import safe_next

router = APIRouter(include_in_schema=False)


def _origins(context: AppContext) -> BoardOrigins:
    if context.board_origins is None:
        raise NotFound("boards are not served on their own origins here; open /boards/<project>/")
    return context.board_origins


def _board_next(project: str, next_path: str) -> str:
    """A local path inside this project's board, else the board's front page."""
    target = safe_next(next_path)
    prefix = board_prefix(project)
    return target if target == prefix or target.startswith(prefix + "/") else prefix + "/"


@router.get("/auth/board-pass")
def board_pass(
    request: Request,
    context: ContextDep,
    user: OptionalUser,
    project: Annotated[str, Query(max_length=63)],
    next: Annotated[str, Query(max_length=URL_PATH_MAX)] = "/",
) -> Response:
    """On tbhub's origin: a signed-in member of `project` gets a 60 s pass to its board."""
    origins = _origins(context)
    check_project_name(project)
    if user is None:
        here = f"/auth/board-pass?{urlencode({'project': project, 'next': next})}"
        return RedirectResponse(f"/auth/login?next={quote(here, safe='')}", status_code=302)
    if not may_open(context.access, context.compares, user.id, project):
        raise NotFound(  # the same whether it exists or not, as the board gate answers
            f"there is no board {project!r} that you can open; the projects you can open are "
            "listed at /"
        )
    signed_in = signed_in_session(request, context)
    assert signed_in is not None  # the user came from it
    token = origins.issue_pass(user_id=user.id, project=project, epoch=user.session_epoch,
                               session_id=signed_in.session_id)  # fmt: skip
    query = urlencode({"pass": token, "next": _board_next(project, next)})
    return RedirectResponse(origins.url(project, f"/_tbhub/enter?{query}"), status_code=302)


@router.get("/_tbhub/enter")
def enter_board_origin(
    request: Request,
    context: ContextDep,
    pass_: Annotated[str | None, Query(alias="pass", max_length=TOKEN_MAX * 2)] = None,
    share: Annotated[str | None, Query(max_length=TOKEN_LENGTH)] = None,
    next: Annotated[str, Query(max_length=URL_PATH_MAX)] = "/",
) -> Response:
    """On a board's origin: a pass (or a share link) for this board becomes its cookie."""
    origins = _origins(context)
    project = origins.project_of_host(request.headers.get("host"))
    if project is None:
        raise NotFound("open a board at its own address, <project>." + origins.domain)
    secure = context.settings.public_url.startswith("https://")
    response = RedirectResponse(_board_next(project, next), status_code=303)
    board = origins.redeem_pass(pass_, project) if pass_ else None
    grant = context.shares.lookup(share) if share else None
    if board is not None:
        response.set_cookie(context.cookies.board, origins.cookie_value(board), httponly=True,
                            samesite="lax", secure=secure, path="/",
                            max_age=context.settings.session_max_age)  # fmt: skip
    elif grant is not None and grant.project == project:
        response.set_cookie(SHARE_COOKIE, share or "", httponly=True, samesite="lax",
                            secure=secure, path=board_prefix(project) + "/")  # fmt: skip
    else:
        raise Forbidden(
            f"this pass is not for this board or is older than {PASS_SECONDS} s; open the "
            "board again from tbhub"
        )
    return response
