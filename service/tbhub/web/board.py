"""/projects/<p>/board: the project's board, its state and the plugins an owner turns on and
off (supervisor/board_settings.py's `toggleable_plugins`: today the projector). Every member
sees which are on, as the board bar tells them which are off; owners (and admins) get the
buttons, which save the plugins through the same service function as PUT
/api/v1/projects/<p>/board/settings. A change to the plugins changes the board's spec, so the
supervisor replaces the board blue/green, as after the API's change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess, require_project
from tbhub.core.bounds import TOKEN_MAX
from tbhub.core.errors import InvalidInput, TbhubError
from tbhub.core.models import Board, BoardSettings, Role, User
from tbhub.domain.overview import board_detail, board_state
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.supervisor.board_settings import (
    SettingsChange,
    toggleable_plugins,
    update_settings,
)
from tbhub.web.render import WebUser, attempt, caller_of, check_form_token, done, form_page

router = APIRouter(include_in_schema=False)

PLUGIN_NAME_MAX = 64  # a TensorBoard plugin name, as board settings bound them


def _show(
    request: Request, session: Session, context: AppContext, user: User, access: ProjectAccess,
    *, error: TbhubError | None = None,
) -> Response:  # fmt: skip
    board = session.get(Board, access.project_id)
    own = session.get(BoardSettings, access.project_id)
    chosen = set(own.plugins or []) if own is not None else set()
    values = {
        "project": access.name,
        "tab": "board",
        "is_owner": access.role == Role.owner,
        "board": {"state": board_state(board), "detail": board_detail(board)},
        "plugins": [
            {"name": name, "why": why, "on": name in chosen}
            for name, why in sorted(toggleable_plugins(context.settings).items())
        ],
    }
    return form_page(request, "board.html", values, user=user, error=error)


@router.get("/projects/{name}/board")
def board_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    access = require_project(context.access, caller_of(user), name, Role.viewer)
    return _show(request, session, context, user, access)


@router.post("/projects/{name}/board/plugins")
def set_plugin(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    plugin: Annotated[str, Form(max_length=PLUGIN_NAME_MAX)],
    state: Annotated[Literal["on", "off"], Form()],
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    """Turn one plugin on or off (owners, as PUT .../board/settings); a refusal (a plugin this
    host cannot confine) is shown on the page."""
    check_form_token(request, csrf_token, "board plugins")
    access = require_project(context.access, caller_of(user), name, Role.owner)

    def save(tx: Session) -> None:
        toggleable = toggleable_plugins(context.settings)
        if plugin not in toggleable:
            raise InvalidInput(
                f"no plugin {plugin[:PLUGIN_NAME_MAX]!r} to turn on or off; the plugins a "
                f"project can turn on: {', '.join(sorted(toggleable))}"
            )
        own = tx.get(BoardSettings, access.project_id)
        plugins = set(own.plugins or []) if own is not None else set()
        plugins = plugins | {plugin} if state == "on" else plugins - {plugin}
        update_settings(tx, project=name, change=SettingsChange(plugins=sorted(plugins)),
                        actor=user.name, now=datetime.now(UTC),
                        backend=context.settings.board_backend, toggleable=toggleable)  # fmt: skip

    result = attempt(context.factory, save)
    if isinstance(result, TbhubError):
        return _show(request, session, context, user, access, error=result)
    context.wake_supervisor()
    return done(f"/projects/{name}/board#plugins-heading", f"plugin_{state}")
