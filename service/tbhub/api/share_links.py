"""/api/v1/projects/<p>/share-links: read-only links to a board, managed by its owners."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from tbhub.auth import share_links
from tbhub.auth.caller import require_project
from tbhub.core.bounds import INT32_MAX
from tbhub.core.models import Role
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["share links"])


class ShareLinkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_in_hours: float = Field(
        default=24 * 7, gt=0, le=share_links.MAX_DAYS * 24, allow_inf_nan=False, strict=True,
        description="How long the link works; at most a year.",
    )  # fmt: skip
    note: str | None = Field(default=None, max_length=255, description="Who it is for.")


@router.post("/projects/{name}/share-links", status_code=201)
def create_share_link(
    name: ProjectInPath,
    body: ShareLinkIn,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:
    """A new link; its URL is shown this once (only a hash of its token is kept)."""
    require_project(context.access, caller, name, Role.owner)
    link, token = share_links.create_link(
        session, project=name, expires_in=timedelta(hours=body.expires_in_hours),
        note=body.note, actor=caller.name,
    )  # fmt: skip
    return {**share_links.describe(link), "url": f"/share/{token}"}


@router.get("/projects/{name}/share-links")
def list_share_links(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    require_project(context.access, caller, name, Role.owner)
    return {
        "links": [share_links.describe(k) for k in share_links.list_links(session, project=name)]
    }


@router.delete("/projects/{name}/share-links/{link_id}", status_code=204)
def revoke_share_link(
    name: ProjectInPath,
    link_id: Annotated[int, Path(ge=1, le=INT32_MAX)],
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> None:
    """The link stops working at once here, and on the board within ~15 s (caches)."""
    require_project(context.access, caller, name, Role.owner)
    share_links.revoke_link(session, project=name, link_id=link_id, actor=caller.name)
    context.invalidate(context.shares, after=session)
