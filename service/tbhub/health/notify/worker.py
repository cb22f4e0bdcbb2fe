"""The sending side of the outbox (outbox.py writes the rows): a thread on the leader claims
what is due, folds a target's minute into one digest, and hands each target's messages to a
small pool of senders; a failure is retried with backoff and the last one recorded where
owners (a channel) or the user (their email preference) see it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.permissions import project_roles
from tbhub.core.db import transaction
from tbhub.core.models import Delivery, EmailPreference, NotificationChannel, User
from tbhub.core.settings import Settings
from tbhub.health.notify.digest import compose
from tbhub.health.notify.send import DeliveryFailed, Target, send

log = logging.getLogger("tbhub")

BATCH = 500  # deliveries read per pass; the rest wait for the next pass
MAX_BACKOFF = timedelta(hours=1)
PRUNE_EVERY = timedelta(hours=1)
SENDERS = 4  # sends in flight at once, to different targets
BUSY_WAIT = 0.5  # seconds between passes while a send is in flight

# Set when deliveries are written (outbox.enqueue, once its transaction commits) and when a
# send ends, so the worker looks at once rather than at its next poll.
due_now = threading.Event()


def utcnow() -> datetime:
    return datetime.now(UTC)


def may_read(session: Session, user: User, project_id: int) -> bool:
    if user.disabled:
        return False
    return user.is_admin or project_id in project_roles(
        session, user_id=user.id, project_id=project_id
    )


@dataclass(frozen=True)
class Batch:
    """What goes out as one message: a target's due deliveries of one project."""

    ids: tuple[int, ...]
    project: str
    target: Target
    payloads: tuple[dict[str, Any], ...]
    attempts: int  # the most tries any of them had, this one included


TargetKey = tuple[int, int | None, int | None]  # project, channel or user


class DeliveryWorker:
    """Sends what the outbox holds: a thread on the leader claims what is due and hands
    each target's messages to a small pool of senders, so a slow receiver holds up only
    its own messages. A target has one send in flight at a time (its order and folding
    hold)."""

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
        self._senders: ThreadPoolExecutor | None = None
        self._busy: set[TargetKey] = set()
        self._lock = threading.Lock()
        self._pruned_at: datetime | None = None

    def start(self) -> DeliveryWorker:
        with transaction(self.factory) as session:
            resumed = session.execute(
                update(Delivery).where(Delivery.state == "sending").values(state="pending")
            )
        if getattr(resumed, "rowcount", 0):
            log.info("notifications: %d interrupted deliveries are due again", resumed.rowcount)  # type: ignore[attr-defined]
        self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="tbhub-notify-send")
        self._thread = threading.Thread(target=self._run, name="tbhub-notify", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop claiming, and wait for the sends in flight; what was claimed but not begun
        stays `sending` and is due again when a worker starts."""
        self._stopping.set()
        due_now.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.notify_timeout * 2 + 5)
            self._thread = None
        if self._senders is not None:
            self._senders.shutdown(wait=True, cancel_futures=True)
            self._senders = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._dispatch()
                wait = self._next_due()
            except Exception:  # a database hiccup: try again at the next poll
                log.exception("notifications: a delivery pass failed")
                wait = self.poll_seconds
            due_now.wait(wait)
            due_now.clear()

    def run_once(self) -> float:
        """One pass, its sends made here one after another (a worker not started: tests,
        tools); returns the seconds until the next delivery is due."""
        self._dispatch()
        return self._next_due()

    def _dispatch(self) -> None:
        now = self.clock()
        self._prune(now)
        with transaction(self.factory) as session:
            jobs = self._claim(session, now)
        for key, batches in jobs.items():
            if self._senders is None:
                self._deliver(key, batches)
                continue
            with self._lock:
                self._busy.add(key)
            self._senders.submit(self._deliver, key, batches)

    def _deliver(self, key: TargetKey, batches: list[Batch]) -> None:
        try:
            for batch in batches:
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
        except Exception:  # the rows stay `sending` until the next start
            log.exception("notifications: recording a delivery failed")
        finally:
            with self._lock:
                self._busy.discard(key)
            due_now.set()  # what this target has waiting may be due now

    def _next_due(self) -> float:
        with transaction(self.factory) as session:
            due = session.scalar(
                select(func.min(Delivery.next_attempt_at)).where(Delivery.state == "pending")
            )
        wait = self.poll_seconds
        if due is not None:
            wait = min(wait, max(0.0, (due - self.clock()).total_seconds()))
        with self._lock:
            busy = bool(self._busy)
        # A due delivery whose target is busy waits for that send, which wakes the loop.
        return max(wait, BUSY_WAIT) if busy else wait

    def _claim(self, session: Session, now: datetime) -> dict[TargetKey, list[Batch]]:
        """Due deliveries, claimed (`sending`) and grouped into messages per target; a busy
        target's wait for its send to end."""
        due = session.scalars(
            select(Delivery)
            .where(Delivery.state == "pending", Delivery.next_attempt_at <= now)
            .order_by(Delivery.id)
            .limit(BATCH)
        ).all()
        fold = timedelta(seconds=self.settings.notify_fold_seconds)
        with self._lock:
            busy = set(self._busy)
        # Folding on: a target's due deliveries of a project go as one message. Off: each
        # goes as its own (the row id keeps them apart).
        groups: dict[tuple[int, int | None, int | None, int], list[Delivery]] = {}
        for row in due:
            if (row.project_id, row.channel_id, row.user_id) in busy:
                continue
            key = (row.project_id, row.channel_id, row.user_id, 0 if fold else row.id)
            groups.setdefault(key, []).append(row)
        jobs: dict[TargetKey, list[Batch]] = {}
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
            jobs.setdefault((project_id, channel_id, user_id), []).append(Batch(
                ids=tuple(row.id for row in rows), project=str(rows[0].payload.get("project")),
                target=target, payloads=tuple(row.payload for row in rows),
                attempts=max(row.attempts for row in rows),
            ))  # fmt: skip
        return jobs

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
