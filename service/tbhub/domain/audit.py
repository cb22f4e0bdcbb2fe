"""The audit log: who did what, written in the same transaction as the change, and read back
with filters by the admin CLI and `GET /api/v1/audit`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, or_, select
from sqlalchemy.orm import Session

from tbhub.core.errors import InvalidInput
from tbhub.core.models import AuditEvent
from tbhub.core.timestamps import iso_utc

MAX_PAGE = 1000
TIME_MAX = 40  # characters of an ISO 8601 time
_EVENTS = cast(Table, AuditEvent.__table__)


def parse_time(value: str | None, field: str = "since") -> datetime | None:
    """An ISO 8601 time (a date alone means its midnight, local time if no zone is given)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{field} {value[:TIME_MAX]!r} is not a time; use ISO 8601, e.g. 2026-12-01 or "
            "2026-12-01T08:00:00Z"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def record(session: Session, *, actor: str, action: str, target: str, **detail: Any) -> None:
    session.add(AuditEvent(actor=actor, action=action, target=target, detail=detail))


def insert(session: Session, *, actor: str, action: str, target: str, **detail: Any) -> None:
    """As `record`, as one Core INSERT sent now on the session's connection, rather than an
    object for the next flush (no ORM bookkeeping: a hot path's way)."""
    session.connection().execute(
        _EVENTS.insert(),
        {"actor": actor, "action": action, "target": target, "detail": detail},
    )


def list_events(
    session: Session,
    *,
    user: str | None = None,
    project: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Newest first. `user` matches who acted or whom it was about; `project` matches the
    project and everything in it (`<project>/<run>`); `action` a prefix like `auth.`;
    `since` and `until` the time range [since, until)."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(min(limit, MAX_PAGE))
    if user is not None:
        query = query.where(or_(AuditEvent.actor == user, AuditEvent.target == user))
    if project is not None:
        query = query.where(
            or_(AuditEvent.target == project, AuditEvent.target.startswith(f"{project}/"))
        )
    if action is not None:
        query = query.where(AuditEvent.action.startswith(action))
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    if before_id is not None:
        query = query.where(AuditEvent.id < before_id)
    return list(session.scalars(query))


def as_dict(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": iso_utc(event.at),
        "actor": event.actor,
        "action": event.action,
        "target": event.target,
        "detail": event.detail,
    }
