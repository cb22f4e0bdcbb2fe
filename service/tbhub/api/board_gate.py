"""The two halves of the board gate nginx puts in front of every board.

- `/_auth/board` is nginx's auth_request hook: 200 with `X-Board-Upstream`, 401 or 403.
  It runs for every uncached board request, so it reads only the signed cookie and
  in-memory caches (DESIGN.md, decision 4).
- `/boards/<project>/...` on the control plane answers whatever the board cannot: the
  sign-in redirect, 401/403/404, and the "starting" page while the board comes up.
"""

from __future__ import annotations

import enum
import re
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from tbhub.boards import BoardView
from tbhub.deps import AppContext, ContextDep, signed_in_user_id
from tbhub.errors import Forbidden, NotAuthenticated, NotFound
from tbhub.models import ObservedState
from tbhub.templating import render

router = APIRouter(include_in_schema=False)

BOARD_PATH = re.compile(r"^/boards/([a-z0-9][a-z0-9-]{0,62})(?:/|$)")
ORIGINAL_URI = "x-tbhub-original-uri"
# nginx caches a "go to this board" answer this long (seconds); starting answers not at all.
AUTH_CACHE_SECONDS = 5
RETRY_AFTER_SECONDS = 2


def auth_cache_seconds(idle_timeout: float) -> int:
    """How long nginx may reuse a "let in" answer. Cached answers hide accesses from the
    idle culler, so the cache lasts at most a quarter of the idle timeout."""
    return max(1, min(AUTH_CACHE_SECONDS, int(idle_timeout / 4)))


class Verdict(enum.Enum):
    anonymous = "anonymous"
    unknown_project = "unknown_project"
    forbidden = "forbidden"
    allowed = "allowed"


def judge(request: Request, context: AppContext, project: str) -> tuple[Verdict, int | None]:
    """The caller's standing towards `project`, and the project id when allowed."""
    user_id = signed_in_user_id(request, context)
    if user_id is None:
        return Verdict.anonymous, None
    access = context.access.lookup(user_id, project)
    if not access.user_exists:
        return Verdict.anonymous, None
    if access.project_id is None:
        return Verdict.unknown_project, None
    if not access.can_view:
        return Verdict.forbidden, None
    return Verdict.allowed, access.project_id


def _board_for(context: AppContext, project_id: int) -> BoardView | None:
    """Note the access; if the board is not serving, ask for it and wake the supervisor."""
    context.tracker.touch(project_id)
    view = context.boards.get(project_id)
    if view is None or not view.serving:
        context.boards.want_running(project_id)
        context.wake_supervisor()
    return view


@router.get("/_auth/board")
def auth_board(request: Request, context: ContextDep) -> Response:
    match = BOARD_PATH.match(request.headers.get(ORIGINAL_URI, ""))
    if match is None:
        return Response(status_code=403)
    verdict, project_id = judge(request, context, match.group(1))
    if verdict is Verdict.anonymous:
        return Response(status_code=401)
    if verdict is not Verdict.allowed:
        # auth_request knows only 2xx/401/403; the fallback page tells 404 from 403.
        return Response(status_code=403)
    assert project_id is not None
    view = _board_for(context, project_id)
    if view is not None and view.serving:
        headers = {
            "X-Board-Upstream": str(view.upstream),
            "X-Accel-Expires": str(auth_cache_seconds(context.settings.idle_timeout)),
        }
    else:
        headers = {"X-Board-Upstream": context.settings.api_address, "X-Accel-Expires": "0"}
    return Response(status_code=200, headers=headers)


@router.post("/api/v1/boards/{project}/heartbeat", status_code=204)
def heartbeat(request: Request, project: str, context: ContextDep) -> Response:
    """A visible, active tab of the board says it is still being read (DESIGN.md, decision 6).

    Counts as an access, like a request to the board, without starting a stopped board.
    """
    verdict, project_id = judge(request, context, project)
    if verdict is Verdict.anonymous:
        raise NotAuthenticated("sign in first: open /auth/login in a browser")
    if verdict is not Verdict.allowed:
        raise NotFound(f"no project named {project!r} that you can open")
    assert project_id is not None
    context.tracker.touch(project_id)
    return Response(status_code=204)


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


@router.api_route("/boards/{project}", methods=["GET", "HEAD", "POST"])
@router.api_route("/boards/{project}/{rest:path}", methods=["GET", "HEAD", "POST"])
def board_fallback(request: Request, project: str, context: ContextDep, rest: str = "") -> Response:
    html = wants_html(request)
    verdict, project_id = judge(request, context, project)
    if verdict is Verdict.anonymous:
        if html:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/auth/login?next={quote(target, safe='')}", status_code=302)
        raise NotAuthenticated(
            "sign in to open this board: send the session cookie from /auth/login"
        )
    if verdict is Verdict.unknown_project:
        raise NotFound(
            f"there is no project named {project!r}; the projects you can open are listed at /"
        )
    if verdict is Verdict.forbidden:
        raise Forbidden(
            f"you are not a member of project {project!r}; ask one of its owners to add you"
        )
    assert project_id is not None
    view = _board_for(context, project_id)
    failed = view is not None and (view.observed == ObservedState.failed or view.failures > 0)
    headers = {"Cache-Control": "no-store", "Retry-After": str(RETRY_AFTER_SECONDS)}
    if html:
        page = render(
            request, "starting.html", {"project": project, "failed": failed}, status_code=200
        )
        page.headers.update(headers)
        return page
    return JSONResponse(
        {
            "error": {
                "code": "board_starting",
                "message": f"the board of {project!r} is starting; retry in {RETRY_AFTER_SECONDS}s",
            }
        },
        status_code=503,
        headers=headers,
    )
