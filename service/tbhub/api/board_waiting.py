"""What the board gate tells the readers of a board that does not serve: it is starting (again
after a failure), it failed (its starts fail, or it is refused), or the host's memory budget
has no room for it; as a page that follows the board (static/starting.js) or as the JSON
error TensorBoard's calls get, always with the reason."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from tbhub.domain.board_changes import RECHECK_SECONDS, BoardChanges
from tbhub.domain.boards import BoardView
from tbhub.http.templating import render
from tbhub.supervisor.board_assets import IMMUTABLE, stamped_file, stamped_files

RETRY_AFTER_SECONDS = 2
# With no room for a board, asking again every 2 s would only load the control plane.
NO_CAPACITY_RETRY_SECONDS = 30
# A failed board starts again after a backoff, or once the cause of a refusal is gone.
FAILED_RETRY_SECONDS = 5


@dataclass(frozen=True)
class NotServing:
    """Why a board does not serve, as its readers are told (a page, or a JSON error)."""

    code: str  # board_starting, board_failed, no_capacity
    template: str
    status: int  # of the page; JSON answers are always 503
    retry: int  # Retry-After, seconds
    message: str
    reason: str | None = None


def not_serving(project: str, view: BoardView | None) -> NotServing:
    """Starting (again after a failure: with its reason); failed (refused, or its starts
    fail: with the reason); or no room in the host's memory budget (with the reason)."""
    if view is not None and view.no_capacity:
        reason = view.reason or "no capacity right now: the host's board memory budget is full"
        return NotServing("no_capacity", "no_capacity.html", 503, NO_CAPACITY_RETRY_SECONDS,
                          reason, reason)  # fmt: skip
    if view is not None and view.failed:
        reason = view.reason or "its last start failed"
        return NotServing("board_failed", "starting.html", 503, FAILED_RETRY_SECONDS,
                          f"the board of {project!r} failed: {reason}", reason)  # fmt: skip
    last = view.reason if view is not None and view.failures > 0 else None
    again = f" again after a failed start ({last})" if last else ""
    return NotServing("board_starting", "starting.html", 200, RETRY_AFTER_SECONDS,
                      f"the board of {project!r} is starting{again}", last)  # fmt: skip


# What a board's readers are told of it: serving, or why not (NotServing.code).
BOARD_STATES = ("ready", "board_starting", "board_failed", "no_capacity")


def board_state(project: str, view: BoardView | None) -> tuple[str, str | None]:
    """The board's state as one of BOARD_STATES, and the reason it does not serve."""
    if view is not None and view.serving:
        return "ready", None
    answer = not_serving(project, view)
    return answer.code, answer.reason


async def state_after(
    changes: BoardChanges,
    project: str,
    look: Callable[[], BoardView | None],
    *,
    since: str | None,
    wait: float,
    gone: Callable[[], Awaitable[bool]],
) -> tuple[str, str | None]:
    """The board's state (as board_state()) as soon as it differs from `since`, else after
    `wait` seconds, or at once when `gone()` (the reader left). `look()` reads the board (in a
    worker thread); the supervisor's wake-ups (`changes`) say when to read it again, or every
    RECHECK_SECONDS where none come (a standby replica). No thread is held while waiting."""
    deadline = time.monotonic() + wait
    while True:
        seen = changes.generation  # a change written while `look` reads is not missed
        state, reason = board_state(project, await run_in_threadpool(look))
        remaining = deadline - time.monotonic()
        if state != since or remaining <= 0 or await gone():
            return state, reason
        await changes.wait(min(remaining, RECHECK_SECONDS), since=seen)


def stamped_asked(method: str, rest: str) -> str | None:
    """The stamped script (one of stamped_files()) a request reads, if it reads one: GET or
    HEAD of `rest`, the path after /boards/<p>/. One lookup, nothing read."""
    src = rest.lstrip("/")
    return src if method in ("GET", "HEAD") and src in stamped_files() else None


def stamped_answer(request: Request, rest: str) -> Response | None:
    """One of TensorBoard's version-stamped scripts (`rest`: the path after /boards/<p>/),
    answered as the board would while it does not serve: the starting page prefetches them
    so that TensorBoard's page finds them in the cache. None for anything else."""
    src = stamped_asked(request.method, rest)
    found = stamped_file(src) if src is not None else None
    if found is None:
        return None
    headers = {"ETag": found.etag, "Cache-Control": IMMUTABLE}
    if request.headers.get("if-none-match") == found.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" not in request.headers.get("accept-encoding", ""):
        return None  # the board inflates it; it will serve soon
    headers["Content-Encoding"] = "gzip"
    return Response(found.gzipped, media_type=found.content_type, headers=headers)


def not_serving_answer(
    request: Request, project: str, view: BoardView | None, *, html: bool
) -> Response:
    answer = not_serving(project, view)
    headers = {"Cache-Control": "no-store", "Retry-After": str(answer.retry)}
    if html:
        values = {"project": project, "state": answer.code, "reason": answer.reason,
                  "retry": answer.retry, "prefetch": stamped_files()}  # fmt: skip
        page = render(request, answer.template, values, status_code=answer.status)
        page.headers.update(headers)
        return page
    message = f"{answer.message}; retry in {answer.retry}s"
    return JSONResponse(
        {"error": {"code": answer.code, "message": message}}, status_code=503, headers=headers
    )
