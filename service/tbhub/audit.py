"""The audit log: who did what, written in the same transaction as the change."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tbhub.models import AuditEvent


def record(session: Session, *, actor: str, action: str, target: str, **detail: Any) -> None:
    session.add(AuditEvent(actor=actor, action=action, target=target, detail=detail))
