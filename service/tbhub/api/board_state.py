"""GET /api/v1/boards/<project>/state: the starting page's long-poll on its board.

The page (static/starting.js) says which state it shows (`since`); the answer comes as soon
as the board's state differs, or after `wait` seconds with the same state. The supervisor
wakes the waiters the moment a pass has written a change (domain/board_changes.py), so the
page hands over to TensorBoard as soon as the gate would proxy to it. Like the page's own
requests to the board, asking counts as an access and asks for a stopped board."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from tbhub.api.board_gate import board_for, readable_board
from tbhub.api.board_waiting import state_after
from tbhub.http.deps import ContextDep, ProjectInPath

router = APIRouter(prefix="/api/v1/boards", tags=["boards"])

MAX_WAIT_SECONDS = 30.0  # below nginx's and browsers' read timeouts
State = Literal["ready", "board_starting", "board_failed", "no_capacity"]


@router.get("/{project}/state")
async def follow_board_state(
    request: Request,
    project: ProjectInPath,
    context: ContextDep,
    since: Annotated[State | None, Query(description="The state the page shows.")] = None,
    wait: Annotated[
        float, Query(ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for a change.")
    ] = 25.0,
) -> Any:
    """`state` (ready, board_starting, board_failed, no_capacity) and `reason` (why it does
    not serve; null when ready or unknown), as soon as the state differs from `since`, else
    after `wait` seconds (at most 30) with `changed` false. Readers of the board only (the
    same check as the board's own requests: session, token or own-origin cookie)."""
    board = await run_in_threadpool(readable_board, request, context, project)
    state, reason = await state_after(
        context.board_changes, project, lambda: board_for(context, board),
        since=since, wait=wait, gone=request.is_disconnected,
    )  # fmt: skip
    body = {"project": project, "state": state, "reason": reason, "changed": state != since}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})
