"""Background jobs for `tbhub serve`: scheduled backups, backups soon after the storage
changes, the trash purge after its grace period, and (optionally) scheduled retention.

Due times come from the database (the last backup run) or from the grace period itself, so
a restarted server picks up where the last one left off; nothing waits only in memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.errors import TbhubError
from tbhub.core.models import BackupRun
from tbhub.core.settings import Settings
from tbhub.housekeeping import backup, retention, trash

log = logging.getLogger("tbhub.jobs")
ACTOR = "scheduler"
PURGE_EVERY = 3600.0


class JobRunner:
    def __init__(
        self,
        settings: Settings,
        factory: sessionmaker[Session],
        *,
        tick: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.tick = tick
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._change_pending_since: float | None = None
        self._last_purge = 0.0
        self._last_retention = clock()  # the first scheduled apply is one interval away

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tbhub-jobs", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the job in progress (if any) ends."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def notify_change(self) -> None:
        """The storage changed (the storage watcher calls this): take a snapshot
        `backup_after_change_seconds` from now. Without that setting it costs nothing."""
        if not (self.settings.backup_target and self.settings.backup_after_change_seconds):
            return
        if self._change_pending_since is None:
            self._change_pending_since = self.clock()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_due()
            self._wake.wait(self._next_wait())
            self._wake.clear()

    def _next_wait(self) -> float:
        """Sleep until the next tick, or until a pending change-triggered backup is due."""
        after = self.settings.backup_after_change_seconds
        pending = self._change_pending_since
        if after and pending is not None:
            return max(0.0, min(self.tick, pending + after - self.clock()))
        return self.tick

    # -- one pass ---------------------------------------------------------------------------

    def run_due(self) -> list[str]:
        """Run whatever is due now; returns the names of the jobs it ran."""
        now = self.clock()
        ran = []
        if now - self._last_purge >= PURGE_EVERY:
            self._last_purge = now
            ran += self._guarded("purge", lambda: trash.purge(
                self.factory, self.settings, older_than_days=self.settings.trash_grace_days,
                actor=ACTOR))  # fmt: skip
        hours = self.settings.retention_interval_hours
        if hours and now - self._last_retention >= hours * 3600:
            self._last_retention = now
            ran += self._guarded("retention", self._apply_retention)
        if self.settings.backup_target and self.backup_due(now):
            self._change_pending_since = None
            ran += self._guarded("backup", lambda: backup.run_backup(
                self.factory, self.settings, actor=ACTOR))  # fmt: skip
        return ran

    def backup_due(self, now: float) -> bool:
        after = self.settings.backup_after_change_seconds
        pending = self._change_pending_since
        if after and pending is not None and now - pending >= after:
            return True
        interval = self.settings.backup_interval_hours
        if not interval:
            return False
        with self.factory() as session:
            last = session.scalars(
                select(BackupRun.started_at).order_by(BackupRun.id.desc())
            ).first()
        return last is None or now - last.timestamp() >= interval * 3600

    def _apply_retention(self) -> None:
        plans = retention.plan_retention(self.factory, self.settings)
        report = retention.apply_plans(self.factory, self.settings, plans, actor=ACTOR)
        log.info("retention: %s", report.as_dict())

    def _guarded(self, name: str, job: Callable[[], object]) -> list[str]:
        """Run a job; its failure is logged (and recorded by the job), never raised."""
        try:
            job()
        except TbhubError as exc:
            log.error("%s failed: %s", name, exc.message)
        except Exception:
            log.exception("%s failed", name)
        return [name]


def start_jobs(settings: Settings, factory: sessionmaker[Session]) -> JobRunner:
    """What `tbhub serve` calls once: start the job runner; call .stop() on shutdown."""
    runner = JobRunner(settings, factory)
    runner.start()
    return runner
