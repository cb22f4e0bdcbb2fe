"""/admin: the admin console, for instance admins only (everyone else gets 403, on every page
and every form). Boards, users, the audit log, backups and storage.

Each form calls the service function its API route calls (board_settings, users, audit,
jobs/backup); the pages only read and render."""

from __future__ import annotations

import enum
import time
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.core.bounds import INT32_MAX, PASSWORD_MAX, PROJECT_NAME_MAX, TOKEN_MAX, USER_NAME_MAX
from tbhub.core.errors import Forbidden, TbhubError
from tbhub.core.models import User
from tbhub.domain import audit, users
from tbhub.housekeeping.backup import backup_status, last_runs, recovery_point_age
from tbhub.housekeeping.storage_report import storage_report
from tbhub.http.deps import ContextDep, ProjectInPath, SessionDep, UserNameInPath
from tbhub.supervisor.board_settings import (
    SettingsChange,
    describe_boards,
    request_restart,
    request_stop,
    update_settings,
)
from tbhub.web.render import WebUser, attempt, check_form_token, done, form_page, page

router = APIRouter(prefix="/admin", include_in_schema=False)
AUDIT_PAGE = 50
ACTION_MAX = 64


def admin_user(user: WebUser) -> User:
    """The signed-in admin; anyone else gets 403, before any form is looked at."""
    if not user.is_admin:
        raise Forbidden(
            "the admin console is for instance admins; ask one to make you an admin "
            "(`tbhub admin user make-admin NAME`)"
        )
    return user


AdminUser = Annotated[User, Depends(admin_user)]
CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]


def human_age(seconds: float | None) -> str:
    """42 s, 5 min, 3.2 h, 2.0 d; '' for none."""
    if seconds is None:
        return ""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# -- the overview ---------------------------------------------------------------------------


@router.get("")
def overview(
    request: Request, user: AdminUser, session: SessionDep, context: ContextDep
) -> Response:
    boards = describe_boards(session, context.settings)
    accounts = users.list_users(session)
    last, good = last_runs(session)
    values = {
        "boards": boards,
        "ready": sum(b["observed"] == "ready" for b in boards),
        "memory_used": sum(b["pss_bytes"] or 0 for b in boards if b["observed"] == "ready"),
        "memory_budget": context.settings.memory_budget_bytes,
        "starts": context.board_metrics.start_latency,
        "accounts": accounts,
        "admins": sum(u.is_admin for u in accounts),
        "disabled": sum(u.disabled for u in accounts),
        "events": audit.list_events(session, limit=5),
        "backup_target": context.settings.backup_target,
        "last_backup": last,
        "recovery_point_age": human_age(recovery_point_age(good, time.time())),
        "storage": storage_report(session, context.settings, context.usage),
    }
    return page(request, "admin/overview.html", values, user=user)


# -- boards ---------------------------------------------------------------------------------


@router.get("/boards")
def boards_page(
    request: Request, user: AdminUser, session: SessionDep, context: ContextDep
) -> Response:
    values = {"boards": describe_boards(session, context.settings)}
    return page(request, "admin/boards.html", values, user=user)


class BoardAction(enum.StrEnum):
    restart = "restart"
    stop = "stop"
    pin = "pin"
    unpin = "unpin"


BOARD_NOTICES = {BoardAction.restart: "board_restarting", BoardAction.stop: "board_stopping",
                 BoardAction.pin: "board_pinned", BoardAction.unpin: "board_unpinned"}  # fmt: skip


@router.post("/boards/{name}/{action}")
def board_action(
    request: Request,
    name: ProjectInPath,
    action: BoardAction,
    user: AdminUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: CsrfField = "",
) -> Response:
    """Restart (blue/green), stop, pin or unpin a board: desired state only, as the API's
    routes write it; the supervisor acts on its next pass."""
    check_form_token(request, csrf_token, "board")
    now = datetime.now(UTC)
    if action is BoardAction.restart:
        request_restart(session, project=name, actor=user.name, now=now)
    elif action is BoardAction.stop:
        request_stop(session, project=name, actor=user.name, now=now)
    else:
        change = SettingsChange(pinned=action is BoardAction.pin)
        update_settings(session, project=name, change=change, actor=user.name, now=now,
                        backend=context.settings.board_backend)  # fmt: skip
    context.wake_supervisor()
    return done("/admin/boards", BOARD_NOTICES[action])


# -- users ----------------------------------------------------------------------------------


def _users(
    request: Request, session: Session, user: User, *, error: TbhubError | None = None,
    form: dict[str, Any] | None = None,
) -> Response:  # fmt: skip
    """The users page; after a refused form, with the reason (and the form as it was sent)."""
    values = {"accounts": users.list_users(session), "form": form or {}}
    return form_page(request, "admin/users.html", values, user=user, error=error)


@router.get("/users")
def users_page(request: Request, user: AdminUser, session: SessionDep) -> Response:
    return _users(request, session, user)


@router.post("/users")
def create_user(
    request: Request,
    user: AdminUser,
    session: SessionDep,
    context: ContextDep,
    name: Annotated[str, Form(max_length=USER_NAME_MAX)],
    password: Annotated[str, Form(max_length=PASSWORD_MAX)],
    admin: Annotated[bool, Form()] = False,
    csrf_token: CsrfField = "",
) -> Response:
    """A local account, as POST /api/v1/users makes it; a refusal is shown on the page."""
    check_form_token(request, csrf_token, "new user")
    result = attempt(context.factory, lambda s: users.create_user(
        s, name=name, password=password, is_admin=admin, actor=user.name))  # fmt: skip
    if isinstance(result, TbhubError):
        return _users(request, session, user, error=result, form={"name": name, "admin": admin})
    return done("/admin/users", "user_created")


class UserAction(enum.StrEnum):
    disable = "disable"
    enable = "enable"
    make_admin = "make-admin"
    remove_admin = "remove-admin"


@router.post("/users/{name}/{action}")
def user_action(
    request: Request,
    name: UserNameInPath,
    action: UserAction,
    user: AdminUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: CsrfField = "",
) -> Response:
    """Disable or enable an account (its sessions stop at once), or make it an admin or not,
    as PATCH /api/v1/users/<name> does; a refusal (the last admin) is shown on the page."""
    check_form_token(request, csrf_token, "user")

    def change(s: Session) -> User:
        if action in (UserAction.disable, UserAction.enable):
            return users.set_disabled(s, name=name, disabled=action is UserAction.disable,
                                      actor=user.name)  # fmt: skip
        return users.set_admin(s, name=name, is_admin=action is UserAction.make_admin,
                               actor=user.name)  # fmt: skip

    result = attempt(context.factory, change)
    if isinstance(result, TbhubError):
        return _users(request, session, user, error=result)
    context.forget_identities()  # committed by attempt()
    return done("/admin/users", "user_updated")


# -- the audit log --------------------------------------------------------------------------


@router.get("/audit")
def audit_page(
    request: Request,
    user: AdminUser,
    session: SessionDep,
    of_user: Annotated[str, Query(alias="user", max_length=USER_NAME_MAX)] = "",
    action: Annotated[str, Query(max_length=ACTION_MAX)] = "",
    project: Annotated[str, Query(max_length=PROJECT_NAME_MAX)] = "",
    since: Annotated[str, Query(max_length=audit.TIME_MAX)] = "",
    until: Annotated[str, Query(max_length=audit.TIME_MAX)] = "",
    before_id: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=audit.MAX_PAGE)] = AUDIT_PAGE,
) -> Response:
    """The audit log with the filters of GET /api/v1/audit; empty fields filter nothing."""
    filters = {"user": of_user, "action": action, "project": project, "since": since,
               "until": until}  # fmt: skip
    error, events = None, []
    try:
        events = audit.list_events(
            session, user=of_user or None, project=project or None, action=action or None,
            since=audit.parse_time(since or None), until=audit.parse_time(until or None, "until"),
            before_id=before_id, limit=limit,
        )  # fmt: skip
    except TbhubError as exc:
        error = exc.message
    chosen = {k: v for k, v in filters.items() if v}
    if limit != AUDIT_PAGE:
        chosen["limit"] = str(limit)
    older = (
        "/admin/audit?" + urlencode({**chosen, "before_id": events[-1].id})
        if len(events) == limit else None
    )  # fmt: skip
    newest = "/admin/audit?" + urlencode(chosen) if before_id is not None else None
    values = {"events": events, "filters": filters, "filtered": bool(chosen), "error": error,
              "older": older, "newest": newest}  # fmt: skip
    return page(request, "admin/audit.html", values, user=user, status_code=400 if error else 200)


# -- backups --------------------------------------------------------------------------------


@router.get("/backups")
def backups_page(
    request: Request, user: AdminUser, session: SessionDep, context: ContextDep
) -> Response:
    status = backup_status(session, context.settings, now=time.time())
    values = {**status, "age": human_age(status["recovery_point_age_seconds"]),
              "snapshots": list(reversed(status["snapshots"]))}  # fmt: skip
    return page(request, "admin/backups.html", values, user=user)


# -- storage --------------------------------------------------------------------------------


@router.get("/storage")
def storage_page(
    request: Request, user: AdminUser, session: SessionDep, context: ContextDep
) -> Response:
    report = storage_report(session, context.settings, context.usage)
    return page(request, "admin/storage.html", report, user=user)
