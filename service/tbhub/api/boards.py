"""/api/v1/projects/<name>/board: board status, settings, restart and stop (owners, admins).

Writes only record desired state; the supervisor acts on its next pass."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from tbhub.auth.caller import require_project
from tbhub.core.models import BoardSettings, Role
from tbhub.domain.dashboards import DASHBOARDS, SUGGESTED
from tbhub.domain.projects import get_project
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep
from tbhub.supervisor.board_process import PLUGIN_NAME
from tbhub.supervisor.board_settings import (
    MAX_MEMORY_LIMIT,
    MAX_RELOAD_INTERVAL,
    SAMPLES_PER_PLUGIN,
    UNSET,
    SettingsChange,
    describe_board,
    request_restart,
    request_stop,
    settings_dict,
    toggleable_plugins,
    update_settings,
)

router = APIRouter(prefix="/api/v1/projects/{name}/board", tags=["boards"])


class BoardSettingsIn(BaseModel):
    """Fields left out stay as they are; null goes back to the global default."""

    model_config = ConfigDict(extra="forbid")

    reload_interval: StrictInt | None = Field(default=None, ge=1, le=MAX_RELOAD_INTERVAL)
    samples_per_plugin: str | None = Field(
        default=None, max_length=255, pattern=SAMPLES_PER_PLUGIN.pattern,
        description="TensorBoard's --samples_per_plugin, e.g. 'scalars=500,images=0'.",
    )  # fmt: skip
    memory_limit: StrictInt | None = Field(
        default=None, ge=0, le=MAX_MEMORY_LIMIT, description="Bytes of PSS; 0: no limit."
    )  # a BigInteger column; 1 PiB is far above any host
    pinned: StrictBool = Field(default=False, description="Never stopped when idle or evicted.")
    plugins: list[Annotated[str, Field(pattern=PLUGIN_NAME, max_length=64)]] = Field(
        default_factory=list,
        max_length=32,
        description="Off-by-default plugins to turn on: the projector, or an extra plugin "
        "the operator installed (`tbhub admin plugins install`); others are refused.",
    )
    restricted_dashboards: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=len(DASHBOARDS),
        description="Dashboards (TensorBoard plugin names) the audience may not see; [] lifts "
        "the restriction.",
    )  # fmt: skip
    restricted_audience: Literal["viewers", "share_links", "both"] | None = Field(
        default=None, description="Who is kept from them; null: both."
    )

    def change(self) -> SettingsChange:
        given = {name: getattr(self, name) for name in self.model_fields_set}
        fields = dict.fromkeys(SettingsChange.__dataclass_fields__, UNSET)
        return SettingsChange(**{**fields, **given})


def _now() -> datetime:
    return datetime.now(UTC)


@router.get("")
def get_board(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """State, PSS and limit, restarts by reason, last access and the project's settings."""
    require_project(context.access, caller, name, Role.owner)
    return describe_board(session, get_project(session, name=name), context.settings)


@router.put("/settings")
def put_settings(
    name: ProjectInPath,
    body: BoardSettingsIn,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:
    """Change settings; a change to the process restarts the board blue/green."""
    require_project(context.access, caller, name, Role.owner)
    update_settings(session, project=name, change=body.change(), actor=caller.name, now=_now(),
                    backend=context.settings.board_backend,
                    toggleable=toggleable_plugins(context.settings))  # fmt: skip
    context.invalidate(context.restrictions, after=session)
    context.wake_supervisor()
    return describe_board(session, get_project(session, name=name), context.settings)


@router.get("/restrictions")
def get_restrictions(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """The dashboards this project keeps from its viewers and/or share links (any member may
    read it; owners change it with PUT .../board/settings)."""
    require_project(context.access, caller, name, Role.viewer)
    own = settings_dict(session.get(BoardSettings, get_project(session, name=name).id))
    return {
        "project": name,
        "dashboards": own["restricted_dashboards"],
        "audience": own["restricted_audience"],
        "suggested": list(SUGGESTED),
        "available": sorted(DASHBOARDS),
    }


@router.post("/restart", status_code=202)
def restart(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, str]:
    """Replace the board blue/green; start it if it is stopped."""
    require_project(context.access, caller, name, Role.owner)
    request_restart(session, project=name, actor=caller.name, now=_now())
    context.wake_supervisor()
    return {"project": name, "restart": "requested"}


@router.post("/stop", status_code=202)
def stop(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, str]:
    require_project(context.access, caller, name, Role.owner)
    request_stop(session, project=name, actor=caller.name, now=_now())
    context.wake_supervisor()
    return {"project": name, "desired": "stopped"}
