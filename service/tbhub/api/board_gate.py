"""The two halves of the board gate nginx puts in front of every board.

- `/_auth/board` is nginx's auth_request hook: 200 with `X-Board-Upstream`, 401 or 403.
  It runs for every uncached board request, so it reads only the signed cookie (or a
  bearer token, through the TokenCache) and in-memory caches (DESIGN.md, decision 4).
- `/boards/<project>/...` on the control plane answers whatever the board cannot: the
  sign-in redirect, 401/403/404, and the "starting" page while the board comes up.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from tbhub.api.board_listing import filtered_listing
from tbhub.api.board_waiting import not_serving_answer, stamped_answer, stamped_asked, state_after
from tbhub.auth.caller import Caller, bearer_token, effective_role
from tbhub.auth.permissions import Access
from tbhub.auth.sessions import SessionData, read_cookie
from tbhub.auth.share_links import SHARE_COOKIE, ShareGrant
from tbhub.core.errors import AmbiguousSession, Forbidden, NotAuthenticated, NotFound, UnsafePath
from tbhub.core.log_context import note_request
from tbhub.core.models import DesiredState, ObservedState, Role
from tbhub.core.names import is_compare_slug
from tbhub.domain.boards import BoardRef, BoardView, auth_cache_seconds
from tbhub.domain.dashboards import asks_denied, is_listing
from tbhub.http.deps import (
    AppContext,
    ContextDep,
    ProjectInPath,
    session_is_current,
    signed_in_session,
)
from tbhub.http.http_errors import wants_html

router = APIRouter(include_in_schema=False)

# The project a raw request URI names. nginx keys its cache of hook answers on the same
# regex over the same raw URI (nginx/tbhub.conf.j2 renders it from here).
BOARD_PATH_REGEX = r"^/boards/([a-z0-9][a-z0-9-]{0,62})(?:[/?]|$)"
BOARD_PATH = re.compile(BOARD_PATH_REGEX)
# A raw path that nginx's normalisation would read differently from its bytes: dot
# segments, encoded dots, slashes, backslashes or NUL, doubled slashes. The hook judges
# the raw URI, which is also what goes upstream, so such paths are refused, in nginx and
# here, before anyone judges them.
UNSAFE_BOARD_PATH_REGEX = r"^[^?]*(?:/\.\.?(?:[/?]|$)|//|%2e|%2f|%5c|%00|\\)"
UNSAFE_BOARD_PATH = re.compile(UNSAFE_BOARD_PATH_REGEX, re.IGNORECASE)
ORIGINAL_URI = "x-tbhub-original-uri"
ORIGINAL_METHOD = "x-tbhub-original-method"
# A "let in" answer that holds for every route of the board for the same caller (Host,
# Cookie, Authorization), not only for the URI judged: the caller is kept from no dashboard
# there. nginx's gate keeps it under a key without the URI too, so a page's first request
# lets its next ones (data, fonts, icons) in without a hook call each.
SCOPE_HEADER = "X-Board-Scope"
BOARD_SCOPE = "board"


class Verdict(enum.Enum):
    other_origin = "other_origin"  # own-origin mode: this board is not served on this host
    anonymous = "anonymous"
    # No such project, or one the caller may not read: the two read the same (404), on the
    # board as in the UI, the API and compare, so no one learns which projects exist.
    unknown_project = "unknown_project"
    allowed = "allowed"


# A verdict, the board when allowed, and the dashboards this caller may not see on it.
Judgement = tuple[Verdict, BoardRef | None, frozenset[str]]
NOTHING_DENIED: frozenset[str] = frozenset()


def judge(request: Request, context: AppContext, board: str) -> tuple[Verdict, BoardRef | None]:
    """judge_board() without the restricted dashboards."""
    verdict, ref, _ = judge_board(request, context, board)
    return verdict, ref


def judge_board(request: Request, context: AppContext, board: str) -> Judgement:
    """The caller's standing towards board `board` (a project's, or a compare board), and the
    board when allowed: as the signed-in user (or, on a board's own origin, its board
    session), as a bearer token's user (any scope naming the projects: scripts read scalars
    that way), or else through a share link for this very project board.

    A compare board takes read access to every project its runs come from; one the caller
    cannot open reads as unknown, whether it exists or not.

    A project's viewers and its share links may be kept from some dashboards (its
    restriction: domain/dashboards.py); editors, owners and admins see them all."""
    origins = context.board_origins
    if origins is not None and origins.project_of_host(request.headers.get("host")) != board:
        return Verdict.other_origin, None, NOTHING_DENIED
    standing = _standing(request, context, board)
    if is_compare_slug(board):
        return _judge_compare(context, standing, board)
    verdict, project_id, viewer = (
        standing(board) if standing is not None else (Verdict.anonymous, None, False)
    )
    denied = NOTHING_DENIED
    if verdict is Verdict.allowed and viewer and project_id is not None:
        denied = context.restrictions.lookup(project_id).denied(share_link=False)
    if verdict is not Verdict.allowed:
        grant = _share_grant(request, context)
        if grant is not None and grant.project == board:
            verdict, project_id = Verdict.allowed, grant.project_id
            denied = context.restrictions.lookup(grant.project_id).denied(share_link=True)
    return verdict, BoardRef.of_project(project_id) if project_id is not None else None, denied


# The caller's verdict on one project, its id when allowed, and whether it only views there.
Standing = Callable[[str], tuple[Verdict, int | None, bool]]


def _standing(request: Request, context: AppContext, board: str) -> Standing | None:
    """How the caller stands towards any project; None for a caller with no credential."""
    if request.headers.get("authorization") is not None:
        try:
            grant = context.tokens.lookup(bearer_token(request.headers.get("authorization")) or "")
        except NotAuthenticated:
            return None
        caller = Caller(user_id=grant.user_id, name=grant.user_name, is_admin=False, grant=grant)
        note_request(user=grant.user_name, user_id=grant.user_id)
        return lambda project: _judge_token(context, caller, project)
    data = viewer_session(request, context, board)
    if data is None:
        return None
    note_request(user_id=data.user_id)  # the name would cost the hook a query
    return lambda project: _judge_session(context, data, project)


def _judge_compare(context: AppContext, standing: Standing | None, slug: str) -> Judgement:
    """A compare board shows runs of several projects: a caller who only views one of them
    is kept from what that project restricts for viewers (share links never open one)."""
    if standing is None:
        return Verdict.anonymous, None, NOTHING_DENIED
    entry = context.compares.lookup(slug)
    if entry is None or not entry.projects:
        return Verdict.unknown_project, None, NOTHING_DENIED
    standings = [standing(project) for project in sorted(entry.projects)]
    verdicts = {verdict for verdict, _, _ in standings}
    if Verdict.anonymous in verdicts:
        return Verdict.anonymous, None, NOTHING_DENIED
    if verdicts != {Verdict.allowed}:
        # never says which run, or whether it exists
        return Verdict.unknown_project, None, NOTHING_DENIED
    denied = frozenset().union(*(
        context.restrictions.lookup(project_id).denied(share_link=False)
        for _, project_id, viewer in standings if viewer and project_id is not None
    ))  # fmt: skip
    return Verdict.allowed, BoardRef.of_compare(entry.compare_id), denied


def _only_views(access: Access) -> bool:
    """A member whose own role (or a team's) is viewer: a token of theirs reads as they do."""
    return not access.is_admin and access.role is Role.viewer


def _judge_token(
    context: AppContext, caller: Caller, project: str
) -> tuple[Verdict, int | None, bool]:
    access = context.access.lookup(caller.user_id, project)
    if not access.user_exists:
        return Verdict.anonymous, None, False
    if access.project_id is None or effective_role(caller, access) is None:
        return Verdict.unknown_project, None, False
    return Verdict.allowed, access.project_id, _only_views(access)


def _share_grant(request: Request, context: AppContext) -> ShareGrant | None:
    token = read_cookie(request.headers.getlist("cookie"), SHARE_COOKIE)
    return context.shares.lookup(token) if token else None


def viewer_session(request: Request, context: AppContext, project: str) -> SessionData | None:
    """The session a board request carries (not yet checked against the user): tbhub's
    session cookie, or on a board's own origin only its board cookie, never tbhub's."""
    origins = context.board_origins
    if origins is None:
        return signed_in_session(request, context)
    value = read_cookie(request.headers.getlist("cookie"), context.cookies.board)
    board = origins.read_cookie(value, project)
    if board is None:
        return None
    return SessionData(user_id=board.user_id, expires_at=board.expires_at,
                       session_id=board.session_id, epoch=board.epoch)  # fmt: skip


def judge_user(
    context: AppContext, data: SessionData | None, project: str
) -> tuple[Verdict, int | None]:
    """A session's own standing towards `project` (share links aside)."""
    verdict, project_id, _ = _judge_session(context, data, project)
    return verdict, project_id


def _judge_session(
    context: AppContext, data: SessionData | None, project: str
) -> tuple[Verdict, int | None, bool]:
    if data is None or not context.sessions.is_live(data):  # signed out, or user deleted
        return Verdict.anonymous, None, False
    access = context.access.lookup(data.user_id, project)
    # A disabled user's access reads as no user; a session from an older epoch is over.
    if not access.user_exists or not session_is_current(
        data, disabled=False, epoch=access.session_epoch
    ):
        return Verdict.anonymous, None, False
    if access.project_id is None or not access.can_view:
        return Verdict.unknown_project, None, False
    return Verdict.allowed, access.project_id, _only_views(access)


def board_for(context: AppContext, board: BoardRef) -> BoardView | None:
    """Note the access; if the board is not serving, ask for it, and wake the supervisor
    unless it is starting that board already: its loop follows a starting board by itself
    (supervisor/loop.py), and a wake-up per request (a reader polling, a page's calls) only
    made it run full passes beside the start it waits on."""
    context.tracker.touch(board)
    view = context.boards.get(board)
    if view is None or not view.serving:
        asked = context.boards.want_running(board)
        if asked or not board_starting(view):
            context.wake_supervisor()
    return view


def board_for_asset(
    context: AppContext, board: BoardRef, rest: str, method: str
) -> BoardView | None:
    """`board_for`, except that TensorBoard's stamped scripts (`rest`, the path after the
    board's name) asked of a board that does not serve neither count as an access nor ask
    for the board: the control plane answers them from the installed TensorBoard
    (board_waiting.stamped_answer), so the project page of a stopped board may prefetch
    them without starting it."""
    if stamped_asked(method, rest) is not None:
        view = context.boards.get(board)
        if view is None or not view.serving:
            return view
    return board_for(context, board)


def board_starting(view: BoardView | None) -> bool:
    """The supervisor has started this board, which is wanted and not yet ready."""
    return (
        view is not None
        and view.desired == DesiredState.running
        and view.observed == ObservedState.starting
    )


def check_board_path(raw_uri: str) -> None:
    if UNSAFE_BOARD_PATH.search(raw_uri):
        raise UnsafePath(
            "board paths may not contain dot segments, encoded dots, slashes or backslashes, "
            "or doubled slashes; open the board at /boards/<project>/"
        )


@router.get("/_auth/board")
async def auth_board(request: Request, context: ContextDep) -> Response:
    """The gate's answer. A browser's navigation to a board that is starting waits here for
    it, up to TBHUB_BOARD_START_HOLD seconds (below the hook's read timeout in nginx), and
    then goes straight to TensorBoard: no starting page, no second navigation. Only the
    navigation waits, and no thread while it does (board_waiting.state_after); the board's
    own calls are answered at once. A board still starting after the bound, or one that
    failed, gets the starting page as before."""
    answer, starting = await run_in_threadpool(gate_answer, request, context)
    hold = context.settings.board_start_hold
    if starting is None or hold <= 0 or not held(request):
        return answer
    state, _ = await state_after(
        context.board_changes, starting[0], lambda: board_for(context, starting[1]),
        since="board_starting", wait=hold, gone=request.is_disconnected,
    )  # fmt: skip
    if state != "ready":
        return answer
    answer, _ = await run_in_threadpool(gate_answer, request, context)
    return answer


def held(request: Request) -> bool:
    """A browser's top-level or frame navigation (Sec-Fetch-Mode, which a page's scripts
    cannot set) by GET: the one request the starting page answers that could wait for the
    board instead."""
    return (
        request.headers.get(ORIGINAL_METHOD, "GET") == "GET"
        and request.headers.get("sec-fetch-mode") == "navigate"
    )


def gate_answer(
    request: Request, context: AppContext
) -> tuple[Response, tuple[str, BoardRef] | None]:
    """The hook's answer: 200 with `X-Board-Upstream`, 401 or 403; and when it lets the
    caller in to a board that does not serve (the control plane answers), the project and
    that board."""
    original_uri = request.headers.get(ORIGINAL_URI, "")
    match = BOARD_PATH.match(original_uri)
    if match is None or UNSAFE_BOARD_PATH.search(original_uri):
        return Response(status_code=403), None
    note_request(project=match.group(1))
    try:
        verdict, board, denied = judge_board(request, context, match.group(1))
    except AmbiguousSession:
        # Denied, and never cached; the fallback explains it to the user.
        return Response(status_code=403), None
    if verdict is Verdict.anonymous:
        return Response(status_code=401), None
    rest = original_uri[match.end(1) :]  # what TensorBoard routes, after /boards/<name>
    if verdict is not Verdict.allowed or asks_denied(rest, denied):
        # auth_request knows only 2xx/401/403; the fallback page tells 404 from 403, and
        # says which dashboard is restricted. A 403 is never cached.
        return Response(status_code=403), None
    assert board is not None
    view = board_for_asset(context, board, rest, request.headers.get(ORIGINAL_METHOD, "GET"))
    starting = None
    if view is not None and view.serving:
        cache = 0 if view.swapping else auth_cache_seconds(context.settings.idle_timeout)
        # The plugins listing without the restricted tabs comes from the control plane.
        upstream = context.settings.api_address if denied and is_listing(rest) else view.upstream
        headers = {"X-Board-Upstream": str(upstream), "X-Accel-Expires": str(cache)}
    else:
        headers = {"X-Board-Upstream": context.settings.api_address, "X-Accel-Expires": "0"}
        starting = (match.group(1), board)
    if not denied:
        # Nothing kept from this caller: the same answer for every route of the board, so
        # nginx may let the board's other requests in on it while it keeps it (SCOPE_HEADER).
        headers[SCOPE_HEADER] = BOARD_SCOPE
    return Response(status_code=200, headers=headers), starting


@router.post("/api/v1/boards/{project}/heartbeat", status_code=204)
def heartbeat(request: Request, project: ProjectInPath, context: ContextDep) -> Response:
    """A visible, active tab of the board says it is still being read (DESIGN.md, decision 6).

    Counts as an access, like a request to the board, without starting a stopped board.
    """
    context.tracker.touch(readable_board(request, context, project))
    return Response(status_code=204)


def readable_board(request: Request, context: AppContext, board: str) -> BoardRef:
    """A board (a project's or a compare board) the caller may read (as the hook judges), or
    401/404 for the board page's own calls (heartbeat, bar)."""
    verdict, ref = judge(request, context, board)
    if verdict is Verdict.anonymous:
        raise NotAuthenticated("sign in first: open /auth/login in a browser")
    if verdict is not Verdict.allowed or ref is None:
        raise NotFound(f"no board named {board!r} that you can open")
    return ref


@router.api_route("/boards/{project}", methods=["GET", "HEAD", "POST"])
@router.api_route("/boards/{project}/{rest:path}", methods=["GET", "HEAD", "POST"])
def board_fallback(request: Request, project: ProjectInPath, context: ContextDep) -> Response:
    check_board_path(request.scope.get("raw_path", b"").decode("latin-1"))
    html = wants_html(request)
    verdict, board, denied = judge_board(request, context, project)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    origins = context.board_origins
    if verdict is Verdict.other_origin and origins is not None:
        return RedirectResponse(origins.url(project, target), status_code=302)
    if verdict is Verdict.anonymous and origins is not None:
        back = f"/auth/board-pass?project={project}&next={quote(target, safe='')}"
        return RedirectResponse(f"{context.settings.public_url.rstrip('/')}{back}", 302)
    if verdict is Verdict.anonymous:
        if html:
            return RedirectResponse(f"/auth/login?next={quote(target, safe='')}", status_code=302)
        raise NotAuthenticated(
            "sign in to open this board: send the session cookie from /auth/login"
        )
    if verdict is Verdict.unknown_project and is_compare_slug(project):
        raise NotFound(
            f"there is no compare board {project!r} that you can open: it takes read access "
            "to the project of every run it shows; pick runs to compare at /compare"
        )
    if verdict is Verdict.unknown_project:
        raise NotFound(
            f"there is no project named {project!r} that you can open (if it exists, ask one "
            "of its owners to add you); the projects you can open are listed at /"
        )
    assert board is not None
    rest = board_rest(request, project)
    refused = asks_denied(rest, denied)
    if refused is not None:
        raise Forbidden(
            f"the {refused} dashboard of {project} is restricted for you (its owners keep it "
            f"from viewers or share links); ask an owner or editor of {project} to show it, "
            "or to lift the restriction in the board settings"
        )
    view = board_for_asset(context, board, rest, request.method)
    if denied and is_listing(rest) and view is not None and view.serving:
        return filtered_listing(view, f"/boards/{project}{rest}", denied)
    return stamped_answer(request, rest) or not_serving_answer(request, project, view, html=html)


def board_rest(request: Request, project: str) -> str:
    """The raw request URI after /boards/<project>, as the hook reads it."""
    raw = request.scope.get("raw_path", b"").decode("latin-1")
    query = request.scope.get("query_string", b"").decode("latin-1")
    rest = raw[len(f"/boards/{project}") :]
    return f"{rest}?{query}" if query else rest
