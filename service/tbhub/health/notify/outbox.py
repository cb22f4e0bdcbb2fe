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

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.permissions import project_roles
from tbhub.core.db import transaction
from tbhub.core.models import (
    Delivery,
    EmailPreference,
    NotificationChannel,
    Project,
    Run,
    User,
)
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.health.incidents import board_link
from tbhub.health.notify.digest import compose
from tbhub.health.notify.send import DeliveryFailed, Target, send

log = logging.getLogger("tbhub")

# What an incident carries (helper A's Incident; any object with these attributes will do).
INCIDENT_FIELDS = (
    "id", "project_id", "run_id", "run_path", "tag", "detector", "step", "wall_time",
    "value", "first_seen", "last_seen", "count", "resolved_at", "message",
    # optional: what A's Incident has beyond the agreed fields
    "severity", "value_text", "last_step", "board_path",
)  # fmt: skip
INFO_DETECTORS = frozenset({"finished"})  # news, not a problem
BATCH = 500  # deliveries read per pass; the rest wait for the next pass
MAX_BACKOFF = timedelta(hours=1)
STATES = ("pending", "sending", "sent", "failed", "dropped")
PRUNE_EVERY = timedelta(hours=1)

# Set when an enqueue commits, so the worker sends at once rather than at its next poll.
_wake = threading.Event()


def utcnow() -> datetime:
    return datetime.now(UTC)


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


def may_read(session: Session, user: User, project_id: int) -> bool:
    if user.disabled:
        return False
    return user.is_admin or project_id in project_roles(
        session, user_id=user.id, project_id=project_id
    )


def wake_after_commit(session: Session) -> None:
    from sqlalchemy import event

    event.listen(session, "after_commit", lambda _: _wake.set(), once=True)


# -- the worker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """What goes out as one message: a target's due deliveries of one project."""

    ids: tuple[int, ...]
    project: str
    target: Target
    payloads: tuple[dict[str, Any], ...]
    attempts: int  # the most tries any of them had, this one included


class Stoppable(Protocol):
    def stop(self) -> None: ...


class DeliveryWorker:
    """Sends what the outbox holds, from one thread on the leader."""

    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        *,
        clock: Callable[[], datetime] = utcnow,
        poll_seconds: float = 5.0,
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.clock = clock
        self.poll_seconds = poll_seconds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned_at: datetime | None = None

    def start(self) -> DeliveryWorker:
        with transaction(self.factory) as session:
            resumed = session.execute(
                update(Delivery).where(Delivery.state == "sending").values(state="pending")
            )
        if getattr(resumed, "rowcount", 0):
            log.info("notifications: %d interrupted deliveries are due again", resumed.rowcount)  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._run, name="tbhub-notify", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        _wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.notify_timeout * 2 + 5)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                wait = self.run_once()
            except Exception:  # a database hiccup: try again at the next poll
                log.exception("notifications: a delivery pass failed")
                wait = self.poll_seconds
            _wake.wait(wait)
            _wake.clear()

    def run_once(self) -> float:
        """One pass: send every due batch; returns the seconds until the next is due."""
        now = self.clock()
        self._prune(now)
        with transaction(self.factory) as session:
            batches = self._claim(session, now)
        for batch in batches:
            if self._stopping.is_set():
                break
            error = None
            try:
                send(self.settings, batch.target, compose(
                    batch.project, batch.payloads, public_url=self.settings.public_url,
                    delivery=f"{batch.ids[0]}",
                ))  # fmt: skip
            except DeliveryFailed as exc:
                error = exc.message
            with transaction(self.factory) as session:
                self._record(session, batch, error, self.clock())
        with transaction(self.factory) as session:
            due = session.scalar(
                select(func.min(Delivery.next_attempt_at)).where(Delivery.state == "pending")
            )
        if due is None:
            return self.poll_seconds
        return min(self.poll_seconds, max(0.0, (due - self.clock()).total_seconds()))

    def _claim(self, session: Session, now: datetime) -> list[Batch]:
        due = session.scalars(
            select(Delivery)
            .where(Delivery.state == "pending", Delivery.next_attempt_at <= now)
            .order_by(Delivery.id)
            .limit(BATCH)
        ).all()
        fold = timedelta(seconds=self.settings.notify_fold_seconds)
        # Folding on: a target's due deliveries of a project go as one message. Off: each
        # goes as its own (the row id keeps them apart).
        groups: dict[tuple[int, int | None, int | None, int], list[Delivery]] = {}
        for row in due:
            key = (row.project_id, row.channel_id, row.user_id, 0 if fold else row.id)
            groups.setdefault(key, []).append(row)
        batches = []
        for (project_id, channel_id, user_id, _), rows in groups.items():
            target = self._target(session, project_id, channel_id, user_id)
            if target is None:
                for row in rows:
                    row.state, row.last_error = "dropped", "the channel is off or gone"
                continue
            last = last_sent(session, project_id, channel_id, user_id)
            if fold and last is not None and last + fold > now:
                for row in rows:
                    row.next_attempt_at = last + fold
                continue
            for row in rows:
                row.state, row.attempts = "sending", row.attempts + 1
            batches.append(Batch(
                ids=tuple(row.id for row in rows), project=str(rows[0].payload.get("project")),
                target=target, payloads=tuple(row.payload for row in rows),
                attempts=max(row.attempts for row in rows),
            ))  # fmt: skip
        return batches

    def _target(
        self, session: Session, project_id: int, channel_id: int | None, user_id: int | None
    ) -> Target | None:
        if channel_id is not None:
            channel = session.get(NotificationChannel, channel_id)
            if channel is None or not channel.enabled:
                return None
            return Target.of_channel(channel)
        pref = session.get(EmailPreference, (user_id, project_id))
        user = session.get(User, user_id)
        if pref is None or user is None or not may_read(session, user, project_id):
            return None
        return Target(kind="email", recipients=(pref.address,))

    def _record(self, session: Session, batch: Batch, error: str | None, now: datetime) -> None:
        rows = session.scalars(select(Delivery).where(Delivery.id.in_(batch.ids))).all()
        if error is None:
            for row in rows:
                row.state, row.sent_at, row.last_error = "sent", now, None
            if rows:
                set_outcome(session, rows[0], error=None, at=now)
            return
        final = batch.attempts >= self.settings.notify_max_attempts
        backoff = min(
            MAX_BACKOFF,
            timedelta(seconds=self.settings.notify_retry_backoff * 2 ** (batch.attempts - 1)),
        )
        for row in rows:
            row.last_error = error
            if final:
                row.state = "failed"
            else:
                row.state, row.next_attempt_at = "pending", now + backoff
        if final and rows:
            set_outcome(session, rows[0], error=error, at=now)
        log.warning(
            "notifications: delivery %s to %s failed (try %d of %d): %s",
            batch.ids[0], batch.target.kind, batch.attempts, self.settings.notify_max_attempts,
            error,
        )  # fmt: skip

    def _prune(self, now: datetime) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        cutoff = now - timedelta(days=self.settings.notify_keep_days)
        with transaction(self.factory) as session:
            session.execute(
                delete(Delivery).where(
                    Delivery.state.in_(("sent", "failed", "dropped")),
                    Delivery.created_at < cutoff,
                )
            )


def last_sent(
    session: Session, project_id: int, channel_id: int | None, user_id: int | None
) -> datetime | None:
    query = select(func.max(Delivery.sent_at)).where(
        Delivery.project_id == project_id, Delivery.state == "sent"
    )
    if channel_id is not None:
        query = query.where(Delivery.channel_id == channel_id)
    else:
        query = query.where(Delivery.user_id == user_id, Delivery.channel_id.is_(None))
    return session.scalar(query)


def set_outcome(session: Session, row: Delivery, *, error: str | None, at: datetime) -> None:
    """Where owners (a channel) or the user (their email preference) see how it went."""
    holder: NotificationChannel | EmailPreference | None
    if row.channel_id is not None:
        holder = session.get(NotificationChannel, row.channel_id)
        if holder is not None and error is None:
            holder.last_sent_at = at
    else:
        holder = session.get(EmailPreference, (row.user_id, row.project_id))
    if holder is not None and error is not None:
        holder.last_error, holder.last_error_at = error, at


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
