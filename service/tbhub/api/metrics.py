"""/metrics in the Prometheus text format (prometheus-client): every process's instruments
(core/metrics.py: request latency, the auth hook's caches, board starts and swaps, the
supervisor, the monitor and the watcher) and the figures read here at scrape time: backups
and their recovery point objective, trash, storage space, boards (states, memory, restarts
by reason), run-health incidents and the notification outbox."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from fastapi import APIRouter, Response
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from tbhub.core.metrics import CONTENT_TYPE, exposition
from tbhub.core.models import ObservedState, RestartReason
from tbhub.core.settings import Settings
from tbhub.health.incidents import open_totals
from tbhub.health.notify.outbox import delivery_totals
from tbhub.housekeeping.backup import last_runs, recovery_point_age
from tbhub.housekeeping.trash import trash_totals
from tbhub.http.deps import ContextDep, SessionDep
from tbhub.supervisor.board_settings import board_rows
from tbhub.supervisor.metrics import board_families, incident_families, notify_families

router = APIRouter(tags=["health"])


def _gauge(name: str, text: str, value: float | None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text)
    if value is not None:  # no sample at all until there is something to report
        family.add_metric([], value)
    return family


def housekeeping_families(session: Session, settings: Settings, now: float) -> list[Metric]:
    """Backups (the recovery point and its objective), the trash and the storage's space."""
    last, good = last_runs(session)
    good_at = good.finished_at.timestamp() if good and good.finished_at else None
    count, size = trash_totals(session)
    try:
        disk = shutil.disk_usage(settings.storage)
        capacity, free = float(disk.total), float(disk.free)
    except OSError:  # an unreadable storage root reports no space rather than failing
        capacity = free = None  # type: ignore[assignment]
    return [
        _gauge("tbhub_backup_last_complete_timestamp_seconds",
               "When the newest complete snapshot finished (Unix time).", good_at),
        _gauge("tbhub_backup_last_complete_age_seconds",
               "Seconds since the newest complete snapshot finished: the recovery point.",
               recovery_point_age(good, now)),
        _gauge("tbhub_backup_rpo_seconds",
               "The recovery point objective (TBHUB_BACKUP_RPO_HOURS), when backups are set.",
               settings.backup_rpo_hours * 3600 if settings.backup_target else None),
        _gauge("tbhub_backup_last_run_success",
               "1 if the last backup run completed, 0 if it failed.",
               (1 if last.state == "complete" else 0) if last else None),
        _gauge("tbhub_backup_last_run_timestamp_seconds", "When the last backup run ended.",
               last.finished_at.timestamp() if last and last.finished_at else None),
        _gauge("tbhub_trash_runs", "Runs in the trash.", count),
        _gauge("tbhub_trash_bytes", "Bytes in the trash.", size),
        _gauge("tbhub_storage_capacity_bytes", "Size of the storage root's filesystem.",
               capacity),
        _gauge("tbhub_storage_free_bytes",
               "Bytes free on the storage root's filesystem (for tbhub's user).", free),
    ]  # fmt: skip


class DatabaseFigures(Collector):
    """The families read from the database (and the storage's filesystem) for one scrape."""

    def __init__(self, session: Session, settings: Settings) -> None:
        self.session, self.settings = session, settings

    def collect(self) -> Iterator[Metric]:
        session, settings = self.session, self.settings
        yield from housekeeping_families(session, settings, time.time())
        yield from board_families(
            board_rows(session, settings),
            states=[s.value for s in ObservedState],
            reasons=[r.value for r in RestartReason],
            budget=settings.memory_budget_bytes,
        )
        yield from incident_families(*open_totals(session))
        yield from notify_families(*delivery_totals(session, datetime.now(UTC)))


@router.get("/metrics", response_class=Response)
def metrics(session: SessionDep, context: ContextDep) -> Response:
    context.board_metrics.publish_health()  # current, when this process runs the monitor
    return Response(exposition(DatabaseFigures(session, context.settings)),
                    media_type=CONTENT_TYPE)  # fmt: skip
