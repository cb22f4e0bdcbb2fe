"""The background job runner `tbhub serve` starts: schedules, change trigger, purge."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import BackupRun, TrashEntry
from tbhub.core.settings import Settings
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.watcher import StorageWatcher
from tbhub.housekeeping import retention, trash
from tbhub.housekeeping.runner import JobRunner, start_jobs
from tests.housekeeping.conftest import MakeRun, fill_storage


def backup_states(factory: sessionmaker[Session]) -> list[str]:
    with factory() as session:
        return list(session.scalars(select(BackupRun.state).order_by(BackupRun.id)))


def test_scheduled_backup_runs_when_due_and_not_again_until_the_interval_passes(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, tmp_path: Path
) -> None:
    fill_storage(jobs_settings, runs=1)
    jobs_settings.backup_target = str(tmp_path / "backup")
    jobs_settings.backup_interval_hours = 1
    offset = [0.0]
    runner = JobRunner(jobs_settings, factory, clock=lambda: time.time() + offset[0])
    assert "backup" in runner.run_due()
    assert backup_states(factory) == ["complete"]
    assert "backup" not in runner.run_due()
    offset[0] = 3601
    assert "backup" in runner.run_due()
    assert backup_states(factory) == ["complete", "complete"]


def test_a_change_in_the_storage_triggers_a_backup_soon_after(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, tmp_path: Path
) -> None:
    jobs_settings.backup_target = str(tmp_path / "backup")
    jobs_settings.backup_interval_hours = None
    jobs_settings.backup_after_change_seconds = 0.3
    # The default 30 s tick: the change, not the tick, decides when the backup runs.
    runner = JobRunner(jobs_settings, factory)
    runner.start()
    # The storage watcher, as `tbhub serve` wires it, tells the runner about changes.
    watcher = StorageWatcher(jobs_settings.storage, DatabaseRunSink(factory), mode="inotify",
                             on_change=runner.notify_change)  # fmt: skip
    watcher.start()
    try:
        assert watcher.wait_ready(30)
        time.sleep(0.3)
        assert backup_states(factory) == []  # nothing changed, nothing scheduled
        fill_storage(jobs_settings, runs=1)
        deadline = time.monotonic() + 10
        while backup_states(factory) != ["complete"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert backup_states(factory) == ["complete"]
    finally:
        watcher.stop()
        runner.stop()


def test_the_trash_is_purged_after_the_grace_period(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    make_run(project, "old", age_days=40)
    make_run(project, "older", age_days=50)
    jobs_settings.retention_max_age_days = 30
    retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    [first] = [e for e in trash.list_trash(factory()) if e.run_path == "older"]
    with transaction(factory) as session:
        entry = session.get_one(TrashEntry, first.id)
        entry.trashed_at = retention.utc(time.time() - 8 * 86400)
    jobs_settings.trash_grace_days = 7
    runner = start_jobs(jobs_settings, factory)  # runs due jobs at once
    try:
        deadline = time.monotonic() + 10
        while len(trash.list_trash(factory())) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        runner.stop()
    assert [e.run_path for e in trash.list_trash(factory())] == ["old"]


def test_scheduled_retention_applies_the_policy(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "old", age_days=40)
    jobs_settings.retention_max_age_days = 30
    jobs_settings.retention_interval_hours = 1
    offset = [0.0]
    runner = JobRunner(jobs_settings, factory, clock=lambda: time.time() + offset[0])
    assert "retention" not in runner.run_due()
    offset[0] = 3601
    assert "retention" in runner.run_due()
    assert not run.exists()
