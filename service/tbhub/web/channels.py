"""/projects/<p>/channels: where the project's incidents are sent. Every member sees the
channels (a URL only as its scheme and host: a Slack URL is a credential) and how their last
delivery went; owners (and admins) add, switch off, delete and test them, through the
service functions /api/v1/projects/<p>/channels calls (health/notify/channels.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess, require_project
from tbhub.core.bounds import INT32_MAX, TOKEN_MAX
from tbhub.core.errors import TbhubError
from tbhub.core.models import Role, User
from tbhub.health.notify import channels
from tbhub.health.notify.ssrf import URL_MAX
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.web.health import LABELS, KindsField
from tbhub.web.render import (
    WebUser,
    attempt,
    caller_of,
    check_form_token,
    done,
    form_page,
    project_form,
)

router = APIRouter(include_in_schema=False)

ChannelId = Annotated[int, Path(ge=1, le=INT32_MAX)]
CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]
RECIPIENTS_TEXT_MAX = channels.MAX_RECIPIENTS * (channels.EMAIL_MAX + 2)
SEPARATORS = re.compile(r"[\s,;]+")
KIND_NAMES = {"webhook": "Webhook (JSON, signed)", "slack": "Slack-format incoming webhook",
              "email": "Email"}  # fmt: skip


def _page(project: str) -> str:
    return f"/projects/{project}/channels"


def _show(
    request: Request, session: Session, context: AppContext, user: User, access: ProjectAccess,
    *, error: TbhubError | None = None, form: dict[str, Any] | None = None,
    made_secret: tuple[str, str] | None = None,
) -> Response:  # fmt: skip
    project = access.name
    values = {
        "project": project,
        "tab": "channels",
        "is_owner": access.role == Role.owner,
        "channels": [
            channels.describe(c) for c in channels.list_channels(session, project=project)
        ],
        "kinds": KIND_NAMES,
        "email_on": bool(context.settings.notify_smtp_host),
        "detectors": [(d, LABELS.get(d, d)) for d in channels.DETECTORS],
        "form": form or {},
        "made_secret": made_secret,  # (channel name, secret): shown this once
    }
    return form_page(request, "channels.html", values, user=user, error=error,
                     secret_shown=made_secret is not None)  # fmt: skip


@router.get("/projects/{name}/channels")
def channels_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    access = require_project(context.access, caller_of(user), name, Role.viewer)
    return _show(request, session, context, user, access)


def _act(
    request: Request, session: Session, context: AppContext, user: User, project: str, *,
    csrf_token: str, what: str, action: Callable[[Session], object], notice: str,
) -> Response:  # fmt: skip
    """Every owner's form here but the new channel's; back to the page."""
    return project_form(
        request, user, project, csrf_token=csrf_token, what=what, need=Role.owner,
        action=lambda _access, tx: action(tx), back=_page(project), notice=notice,
        refused=lambda access, error: _show(request, session, context, user, access,
                                            error=error),
    )  # fmt: skip


@router.post("/projects/{name}/channels")
def add_channel(
    request: Request,
    name: ProjectInPath,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    kind: Annotated[Literal["webhook", "slack", "email"], Form()],
    channel_name: Annotated[str, Form(max_length=64)] = "",
    url: Annotated[str, Form(max_length=URL_MAX)] = "",
    secret: Annotated[str, Form(max_length=255)] = "",
    recipients: Annotated[str, Form(max_length=RECIPIENTS_TEXT_MAX)] = "",
    detectors: KindsField = [],  # noqa: B006 - FastAPI copies a default
    csrf_token: CsrfField = "",
) -> Response:
    """A new channel; a webhook's secret that tbhub makes is shown once, on the answer."""
    check_form_token(request, csrf_token, "new channel")
    access = require_project(context.access, caller_of(user), name, Role.owner)
    given = channels.ChannelInput(
        name=channel_name.strip() or None, kind=kind, url=url.strip() or None,
        secret=secret or None, detectors=detectors,
        recipients=[a for a in SEPARATORS.split(recipients) if a] if kind == "email" else None,
    )  # fmt: skip
    result = attempt(context.factory, lambda tx: channels.create_channel(
        tx, context.settings, project=name, given=given, actor=user.name))  # fmt: skip
    # Shown again after a refusal: never the URL or the secret.
    form = {"kind": kind, "channel_name": channel_name, "recipients": recipients,
            "detectors": detectors}  # fmt: skip
    if isinstance(result, TbhubError):
        return _show(request, session, context, user, access, error=result, form=form)
    channel, made = result
    if made is None:
        return done(_page(name), "channel_added")
    return _show(request, session, context, user, access, made_secret=(channel.name, made))


# Before the route below, whose {action} would otherwise take "test" and refuse it.
@router.post("/projects/{name}/channels/{channel_id}/test")
def test_channel(
    request: Request,
    name: ProjectInPath,
    channel_id: ChannelId,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: CsrfField = "",
) -> Response:
    """Send a test message now; the page then says whether it arrived (and the channel keeps
    the error when it did not)."""
    outcome: dict[str, Any] = {}

    def run(tx: Session) -> object:
        outcome.update(channels.send_test(tx, context.settings, project=name,
                                          channel_id=channel_id, actor=user.name))  # fmt: skip
        return None

    response = _act(request, session, context, user, name, csrf_token=csrf_token,
                    what="test channel", action=run, notice="test_sent")  # fmt: skip
    if outcome and not outcome.get("delivered"):
        return done(_page(name) + f"#channel-{channel_id}", "test_failed")
    return response


@router.post("/projects/{name}/channels/{channel_id}/{action}")
def change_channel(
    request: Request,
    name: ProjectInPath,
    channel_id: ChannelId,
    action: Literal["enable", "disable", "delete"],
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: CsrfField = "",
) -> Response:
    if action == "delete":

        def run(tx: Session) -> object:
            channels.delete_channel(tx, project=name, channel_id=channel_id, actor=user.name)
            return None
    else:
        given = channels.ChannelInput(enabled=action == "enable")

        def run(tx: Session) -> object:
            return channels.update_channel(tx, context.settings, project=name,
                                           channel_id=channel_id, given=given,
                                           actor=user.name)  # fmt: skip

    notice = {"enable": "channel_enabled", "disable": "channel_disabled",
              "delete": "channel_deleted"}[action]  # fmt: skip
    return _act(request, session, context, user, name, csrf_token=csrf_token,
                what=f"{action} channel", action=run, notice=notice)  # fmt: skip
