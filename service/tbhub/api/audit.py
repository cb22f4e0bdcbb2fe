"""GET /api/v1/audit: the audit log, newest first, for instance admins."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from tbhub.core.bounds import INT32_MAX, PROJECT_NAME_MAX, USER_NAME_MAX
from tbhub.core.errors import Forbidden
from tbhub.domain import audit
from tbhub.http.deps import CurrentUser, SessionDep

router = APIRouter(prefix="/api/v1", tags=["audit"])


@router.get("/audit")
def list_audit(
    user: CurrentUser,
    session: SessionDep,
    of_user: Annotated[str | None, Query(alias="user", max_length=USER_NAME_MAX)] = None,
    project: Annotated[str | None, Query(max_length=PROJECT_NAME_MAX)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[str | None, Query(max_length=audit.TIME_MAX)] = None,
    until: Annotated[str | None, Query(max_length=audit.TIME_MAX)] = None,
    before_id: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=audit.MAX_PAGE)] = 100,
) -> dict[str, Any]:
    """Filter by user (who acted, or whom it was about), project, action prefix and time
    (`since` <= at < `until`); page with `before_id` = the last id of the previous page."""
    if not user.is_admin:
        raise Forbidden("only instance admins read the audit log")
    events = audit.list_events(session, user=of_user, project=project, action=action,
                               since=audit.parse_time(since),
                               until=audit.parse_time(until, "until"), before_id=before_id,
                               limit=limit)  # fmt: skip
    rows = [audit.as_dict(e) for e in events]
    return {"events": rows, "next_before_id": rows[-1]["id"] if len(rows) == limit else None}
