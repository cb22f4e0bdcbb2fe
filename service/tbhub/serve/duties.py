"""What only the supervisor leader runs: the board backend and supervisor, the job runner,
the storage watcher, the run-health monitor and the notification worker. Built fresh for
each term of leadership and stopped at its end.

One leader means one process starting and stopping boards, one scheduler of backups and
retention, and one walker of the storage writing discovered runs (on NFS the walk is the
expensive part). Standby replicas serve the API, the UI and the auth hook only.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tbhub.core.db import transaction
from tbhub.core.settings import Settings
from tbhub.domain.observers import choose_mode
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.watcher import StorageWatcher
from tbhub.health.monitor import HealthMonitor
from tbhub.housekeeping.runner import JobRunner, start_jobs
from tbhub.http.deps import AppContext
from tbhub.serve.api_process import board_observed
from tbhub.storage.compare_view import compare_root
from tbhub.storage.event_health import Healer
from tbhub.supervisor.backends.base import Backend
from tbhub.supervisor.backends.select import make_backend
from tbhub.supervisor.board_settings import request_heal
from tbhub.supervisor.loop import Supervisor, policy_from_settings
from tbhub.supervisor.state import Limits

log = logging.getLogger("tbhub")


def start_watcher(
    settings: Settings,
    context: AppContext,
    *,
    on_change: Callable[[], None],
    monitor: HealthMonitor | None = None,
) -> StorageWatcher | None:
    """The storage watcher feeding the runs table, and the upload quota's byte counts."""
    if settings.watch_mode == "off":
        return None
    sink = DatabaseRunSink(context.factory)

    def heal(project: str, why: str) -> None:
        with transaction(context.factory) as session:
            asked = request_heal(session, project=project, why=why, now=datetime.now(UTC))
        if asked:
            context.wake_supervisor()

    watcher = StorageWatcher(
        settings.storage,
        sink,
        mode=choose_mode(settings.storage, settings.watch_mode),
        poll_interval=settings.watch_poll_interval,
        on_change=on_change,
        claims=sink.registered,
        healer=Healer(heal),
        on_event_files=monitor.event_files if monitor is not None else None,
        unwatched=[compare_root(settings)],
    )
    watcher.start()
    context.usage.watcher = watcher
    return watcher


def start_monitor(settings: Settings, context: AppContext) -> HealthMonitor | None:
    """The run-health monitor, fed by the watcher; None when turned off (or with no
    watcher to tell it what changed)."""
    if not settings.health_monitor or settings.watch_mode == "off":
        return None
    monitor = HealthMonitor(settings, context.factory, context.scalars)
    monitor.start()
    context.board_metrics.health_lines = monitor.metric_lines
    return monitor


def start_notify(settings: Settings, context: AppContext) -> Any:
    """The notification worker (health/notify), when this tbhub has one."""
    try:
        outbox: Any = importlib.import_module("tbhub.health.notify.outbox")
    except ImportError:
        return None
    starter = getattr(outbox, "start_delivery", None)
    return starter(settings, context.factory) if starter is not None else None


class LeaderDuties:
    """`may_act` is asked before every change the supervisor makes (the replica's fence)."""

    def __init__(
        self, settings: Settings, context: AppContext, *, may_act: Callable[[], bool]
    ) -> None:
        self.settings = settings
        self.context = context
        self.may_act = may_act
        self._backend: Backend | None = None
        self._supervisor: Supervisor | None = None
        self._jobs: JobRunner | None = None
        self._watcher: StorageWatcher | None = None
        self._monitor: HealthMonitor | None = None
        self._notify: Any = None  # health/notify's delivery worker (has .stop())

    @property
    def running(self) -> bool:
        return self._supervisor is not None

    def start(self) -> None:
        settings, context = self.settings, self.context
        self._backend = backend = make_backend(settings)
        self._supervisor = Supervisor(
            factory=context.factory,
            backend=backend,
            tracker=context.tracker,
            storage_root=str(settings.storage),
            compare_root=str(compare_root(settings)),
            idle_timeout=settings.idle_timeout,
            interval=settings.reconcile_interval,
            policy=policy_from_settings(settings),
            limits=Limits(
                memory_limit=int(settings.board_memory_limit) or None,
                cgroup_ratio=settings.board_cgroup_memory_ratio
                if settings.board_backend != "subprocess"
                else None,
            ),
            probe_timeout=settings.board_probe_timeout,
            metrics=context.board_metrics,
            may_act=self.may_act,
            on_observed=lambda: board_observed(context),
        )
        self._supervisor.start()
        self._jobs = start_jobs(settings, context.factory)
        self._monitor = start_monitor(settings, context)
        self._watcher = start_watcher(
            settings, context, on_change=self._jobs.notify_change, monitor=self._monitor
        )
        self._notify = start_notify(settings, context)

    def wake(self) -> None:
        if self._supervisor is not None:
            self._supervisor.wake()

    def stop_boards(self) -> None:
        """Stop every board of this installation without leading (the last replica leaves
        after the leader handed the boards over to it)."""
        backend = make_backend(self.settings)
        try:
            for instance in backend.list_instances():
                backend.stop(instance)
        finally:
            backend.close()

    def stop(self, *, stop_boards: bool) -> None:
        """End this term. `stop_boards`: stop every board too (no replica will adopt them)."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.shutdown(stop_boards=stop_boards)
        if self._watcher is not None:
            self.context.usage.watcher = None
            self._watcher.stop()
            self._watcher = None
        if self._monitor is not None:
            self.context.board_metrics.health_lines = None
            self._monitor.stop()
            self._monitor = None
        if self._notify is not None:
            self._notify.stop()
            self._notify = None
        if self._jobs is not None:
            self._jobs.stop()
            self._jobs = None
        if self._backend is not None:
            self._backend.close()
            self._backend = None
