"""/api/v1/projects/<p>/channels: where a project's incidents are sent (owners change them,
members see them with secrets masked), a test send, and each user's email preferences."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from tbhub.auth.caller import require_project
from tbhub.core.bounds import INT32_MAX, NoControls
from tbhub.core.models import Role
from tbhub.health.notify import channels
from tbhub.health.notify.ssrf import URL_MAX
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["notifications"])

ChannelId = Annotated[int, Path(ge=1, le=INT32_MAX)]
ChannelName = Annotated[str, Field(min_length=1, max_length=64), NoControls]
Url = Annotated[str, Field(min_length=1, max_length=URL_MAX), NoControls]
Secret = Annotated[str, Field(min_length=channels.SECRET_MIN, max_length=255), NoControls]
Address = Annotated[str, Field(min_length=3, max_length=channels.EMAIL_MAX), NoControls]
Detectors = Annotated[
    list[Annotated[str, Field(max_length=32)]], Field(max_length=len(channels.DETECTORS))
]
Recipients = Annotated[list[Address], Field(max_length=channels.MAX_RECIPIENTS)]


class ChannelUpdate(BaseModel):
    """Fields left out stay as they are. `url` and `secret` are never shown again."""

    model_config = ConfigDict(extra="forbid")

    name: ChannelName | None = None
    url: Url | None = Field(default=None, description="webhook and slack: where to POST.")
    secret: Secret | None = Field(
        default=None, description="webhook: the HMAC-SHA256 key (tbhub makes one if left out)."
    )
    recipients: Recipients | None = Field(default=None, description="email: the addresses.")
    detectors: Detectors | None = Field(
        default=None, description="The incident kinds sent; empty: every kind."
    )
    enabled: StrictBool | None = None


class ChannelIn(ChannelUpdate):
    kind: Literal["webhook", "slack", "email"]


class PreferenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: Address | None = Field(
        default=None, description="Where to send; left out: the account's email address."
    )
    detectors: Detectors = Field(default_factory=list, description="Empty: every kind.")
    own_runs_only: StrictBool = Field(
        default=False, description="Only incidents on runs this user registered."
    )


def given(body: ChannelUpdate) -> channels.ChannelInput:
    return channels.ChannelInput(**body.model_dump(exclude_unset=True))


@router.get("/projects/{name}/channels")
def list_channels(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    require_project(context.access, caller, name, Role.viewer)
    return {
        "channels": [channels.describe(c) for c in channels.list_channels(session, project=name)]
    }


@router.post("/projects/{name}/channels", status_code=201)
def create_channel(
    name: ProjectInPath, body: ChannelIn, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    """A new channel. A webhook's secret, when tbhub makes it, is in the answer this once."""
    require_project(context.access, caller, name, Role.owner)
    channel, made = channels.create_channel(
        session, context.settings, project=name, given=given(body), actor=caller.name
    )
    return {**channels.describe(channel), **({"secret": made} if made else {})}


@router.get("/projects/{name}/channels/{channel_id}")
def get_channel(
    name: ProjectInPath, channel_id: ChannelId, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    require_project(context.access, caller, name, Role.viewer)
    channel = channels.get_channel(session, project=name, channel_id=channel_id)
    deliveries = channels.history(session, project=name, channel_id=channel_id)
    return {**channels.describe(channel), "deliveries": deliveries}


@router.patch("/projects/{name}/channels/{channel_id}")
def update_channel(
    name: ProjectInPath, channel_id: ChannelId, body: ChannelUpdate, caller: CallerDep,
    session: SessionDep, context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    require_project(context.access, caller, name, Role.owner)
    channel = channels.update_channel(
        session, context.settings, project=name, channel_id=channel_id, given=given(body),
        actor=caller.name,
    )  # fmt: skip
    return channels.describe(channel)


@router.delete("/projects/{name}/channels/{channel_id}", status_code=204)
def delete_channel(
    name: ProjectInPath, channel_id: ChannelId, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> None:  # fmt: skip
    require_project(context.access, caller, name, Role.owner)
    channels.delete_channel(session, project=name, channel_id=channel_id, actor=caller.name)


@router.post("/projects/{name}/channels/{channel_id}/test")
def test_channel(
    name: ProjectInPath, channel_id: ChannelId, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    """Send a test message now: `delivered`, or the `error` that stopped it."""
    require_project(context.access, caller, name, Role.owner)
    return channels.send_test(session, context.settings, project=name, channel_id=channel_id,
                              actor=caller.name)  # fmt: skip


# -- the caller's own email preferences ---------------------------------------------------------


@router.get("/users/me/email-preferences")
def my_preferences(caller: CallerDep, session: SessionDep) -> dict[str, Any]:
    return {"preferences": channels.list_preferences(session, user_id=caller.user_id)}


@router.put("/projects/{name}/email-preference")
def set_my_preference(
    name: ProjectInPath, body: PreferenceIn, caller: CallerDep, session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:  # fmt: skip
    """Email me this project's incidents (of these kinds, or only on my runs)."""
    require_project(context.access, caller, name, Role.viewer)
    return channels.set_preference(
        session, context.settings, user_id=caller.user_id, project=name, address=body.address,
        detectors=body.detectors, own_runs_only=body.own_runs_only,
    )  # fmt: skip


@router.delete("/projects/{name}/email-preference", status_code=204)
def delete_my_preference(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> None:
    require_project(context.access, caller, name, Role.viewer)
    channels.delete_preference(session, user_id=caller.user_id, project=name)
