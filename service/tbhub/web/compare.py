"""/compare: pick runs from any projects you can read, name the selection, open its board.

`/compare?run=<project>/<run id>&run=...` (what a project page's checkboxes submit) shows
the runs picked; the form posts them back to make (or find) the compare board and opens it.
Without runs, the page explains how to pick them and lists your compare boards. The same
service functions as /api/v1/compare do the work (compare.py)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import Field
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller
from tbhub.core.bounds import TOKEN_MAX
from tbhub.core.errors import TbhubError
from tbhub.core.models import CompareBoard, User
from tbhub.domain.compare import (
    MAX_RUNS,
    board_run_name,
    create_compare,
    delete_compare,
    list_compares,
    pick_runs,
    readable,
)
from tbhub.http.deps import AppContext, ContextDep, SessionDep
from tbhub.supervisor.plan import board_prefix
from tbhub.web.render import WebUser, check_form_token, done, page

router = APIRouter(include_in_schema=False)

RunRefText = Annotated[str, Field(max_length=84)]
NAME_MAX = 128


def caller_of(user: User) -> Caller:
    return Caller(user_id=user.id, name=user.name, is_admin=user.is_admin)


def adjust_url(board: CompareBoard) -> str:
    """This page with the board's runs (and name) picked, to change and open again."""
    query = [("run", f"{m.run.project.name}/{m.run.id}") for m in board.members]
    if board.name:
        query.append(("name", board.name))
    return "/compare?" + urlencode(query)


def _page(
    request: Request,
    context: AppContext,
    session: Session,
    user: User,
    *,
    refs: list[str],
    name: str = "",
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    caller = caller_of(user)
    picked: list[dict[str, Any]] = []
    if refs and error is None:
        try:
            runs = pick_runs(session, access=context.access, caller=caller, refs=refs)
        except TbhubError as exc:
            error, status_code = exc.message, exc.http_status
        else:
            picked = [
                {"ref": str(ref), "run": run, "board_run": board_run_name(ref.project, run)}
                for ref, run in runs
            ]
    boards = [
        {"board": board, "readable": readable(context.access, caller, board),
         "adjust": adjust_url(board)}
        for board in list_compares(session, caller=caller)
    ]  # fmt: skip
    values = {"picked": picked, "name": name, "error": error, "boards": boards,
              "max_runs": MAX_RUNS, "name_max": NAME_MAX}  # fmt: skip
    return page(request, "compare.html", values, user=user, status_code=status_code)


@router.get("/compare")
def compare_page(
    request: Request,
    user: WebUser,
    context: ContextDep,
    session: SessionDep,
    run: Annotated[list[RunRefText], Query(max_length=MAX_RUNS)] = [],  # noqa: B006
    name: Annotated[str, Query(max_length=NAME_MAX)] = "",
) -> Response:
    return _page(request, context, session, user, refs=run, name=name)


@router.post("/compare")
def open_compare(
    request: Request,
    user: WebUser,
    context: ContextDep,
    session: SessionDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
    run: Annotated[list[RunRefText], Form(max_length=MAX_RUNS)] = [],  # noqa: B006
    name: Annotated[str, Form(max_length=NAME_MAX)] = "",
) -> Response:
    """Make (or find) the compare board over the runs still ticked, then open it."""
    check_form_token(request, csrf_token, "compare")
    try:
        board, _made = create_compare(
            session,
            access=context.access,
            caller=caller_of(user),
            refs=run,
            name=name.strip() or None,
            storage_root=context.settings.storage,
        )
    except TbhubError as exc:
        return _page(request, context, session, user, refs=run, name=name, error=exc.message,
                     status_code=exc.http_status)  # fmt: skip
    return RedirectResponse(board_prefix(board.slug) + "/", status_code=303)


@router.post("/compare/{slug}/delete")
def delete_compare_form(
    request: Request,
    slug: Annotated[str, Path(max_length=16)],
    user: WebUser,
    context: ContextDep,
    session: SessionDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    check_form_token(request, csrf_token, "delete compare board")
    delete_compare(session, access=context.access, caller=caller_of(user), slug=slug)
    context.invalidate(context.compares, after=session)
    context.wake_supervisor()
    return done("/compare", "compare_deleted")
