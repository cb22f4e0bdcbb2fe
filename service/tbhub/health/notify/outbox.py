"""The outbox: `enqueue` writes one Delivery row per channel and subscribed user when an
incident comes, in the caller's transaction and nothing more (the monitor never waits on a
network); `start_delivery` starts the worker on the leader that sends them.

A delivery's states: pending (due at next_attempt_at) → sending (claimed by the worker) →
sent, or failed after the last try (recorded on its channel or email preference), or
dropped (its channel was turned off, or its user lost the project). A worker starting
after a crash takes `sending` rows back to pending: a message may then go twice, never
not at all, and the X-Tbhub-Delivery header lets a receiver tell the repeat.

Folding: a target (a channel, or one user's email) gets at most one message per project
within TBHUB_NOTIFY_FOLD_SECONDS; what comes in between waits for the end of that time
and goes out as one digest.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import event, func, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import Delivery, EmailPreference, NotificationChannel, Project, Run, User
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.health.incidents import board_link
from tbhub.health.notify.worker import DeliveryWorker, due_now, may_read

__all__ = ["DeliveryWorker", "delivery_totals", "enqueue", "start_delivery"]

# What an incident carries (helper A's Incident; any object with these attributes will do).
INCIDENT_FIELDS = (
    "id", "project_id", "run_id", "run_path", "tag", "detector", "step", "wall_time",
    "value", "first_seen", "last_seen", "count", "resolved_at", "message",
    # optional: what A's Incident has beyond the agreed fields
    "severity", "value_text", "last_step", "board_path",
)  # fmt: skip
INFO_DETECTORS = frozenset({"finished"})  # news, not a problem
STATES = ("pending", "sending", "sent", "failed", "dropped")


class Stoppable(Protocol):
    def stop(self) -> None: ...


def snapshot(incident: object) -> dict[str, Any]:
    """The incident as JSON: a delivery says what was seen then, whatever changes later.
    A value that is not finite is written as text ("nan", "inf"): JSON has no NaN."""
    out: dict[str, Any] = {}
    for name in INCIDENT_FIELDS:
        value = getattr(incident, name, None)
        if isinstance(value, datetime):
            value = iso_utc(value)
        elif isinstance(value, float) and not math.isfinite(value):
            value = repr(value)
        out[name] = value
    if not out["severity"]:
        out["severity"] = "info" if out["detector"] in INFO_DETECTORS else "warning"
    return out


def enqueue(session: Session, incident: object) -> int:
    """Write a pending delivery for each of the incident's project's channels and each user
    whose email preferences ask for it; returns how many. Call it once per new incident
    (repeats are counted on the incident, not sent again). Only rows are written, in the
    caller's transaction; the worker is woken when that commits."""
    payload = snapshot(incident)
    project_id = payload["project_id"]
    project = session.get(Project, project_id)
    if project is None:
        return 0
    payload["project"] = project.name
    if payload["board_path"] is None and payload["run_path"] is not None:
        payload["board_path"] = board_link(project.name, incident)  # type: ignore[arg-type]
    detector = payload["detector"]
    rows = [
        Delivery(
            project_id=project_id, channel_id=channel.id, incident_id=payload["id"], payload=payload
        )
        for channel in session.scalars(
            select(NotificationChannel).where(
                NotificationChannel.project_id == project_id, NotificationChannel.enabled
            )
        )
        if wants(channel.detectors, detector)
    ]
    run_owner = None
    if payload["run_id"] is not None:
        run_owner = session.scalar(select(Run.created_by).where(Run.id == payload["run_id"]))
    for pref in session.scalars(
        select(EmailPreference).where(EmailPreference.project_id == project_id)
    ):
        user = session.get(User, pref.user_id)
        if user is None or not wants(pref.detectors, detector):
            continue
        if pref.own_runs_only and run_owner != user.name:
            continue
        if may_read(session, user, project_id):
            rows.append(Delivery(project_id=project_id, user_id=user.id,
                                 incident_id=payload["id"], payload=payload))  # fmt: skip
    session.add_all(rows)
    if rows:
        wake_after_commit(session)
    return len(rows)


def wants(detectors: list[str], detector: str | None) -> bool:
    return not detectors or detector in detectors


def wake_after_commit(session: Session) -> None:
    event.listen(session, "after_commit", lambda _: due_now.set(), once=True)


def delivery_totals(session: Session, now: datetime) -> tuple[dict[str, int], float | None]:
    """Deliveries in the outbox by state, and the age in seconds of the oldest one still to
    send (None: none), for /metrics."""
    counts = {state: 0 for state in STATES}
    for state, n in session.execute(select(Delivery.state, func.count()).group_by(Delivery.state)):
        counts[state] = int(n)
    oldest = session.scalar(
        select(func.min(Delivery.created_at)).where(Delivery.state.in_(("pending", "sending")))
    )
    return counts, (now - oldest).total_seconds() if oldest is not None else None


def start_delivery(settings: Settings, session_factory: sessionmaker[Session]) -> Stoppable:
    """The worker that sends the outbox, for the leader's term (serve/duties.py)."""
    return DeliveryWorker(settings, session_factory).start()
