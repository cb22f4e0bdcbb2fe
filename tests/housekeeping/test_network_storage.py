"""Retention and backup on a real network filesystem (sshfs from a private sshd on loopback,
tests/support/sshfs.py) that drops or hangs: they refuse to act, delete nothing and mark
nothing backed up."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.errors import BackupFailed, StorageUnavailable
from tbhub.core.models import AuditEvent, BackupRun, TrashEntry
from tbhub.core.settings import Settings
from tbhub.housekeeping import backup, retention
from tbhub.housekeeping.snapshots import classify
from tests.housekeeping.conftest import EVENTS, tree_digest
from tests.support.sshfs import SshfsMount, skip_without_sshfs, sshfs_mount


@pytest.fixture
def remote_runs(jobs_settings: Settings, project: str, tmp_path: Path) -> Iterator[SshfsMount]:
    """vision/a/old (40 days) and vision/a/new on the local disk; vision/b is an sshfs
    mount holding b/old (40 days) and b/new. A listing of vision walks a, then b."""
    skip_without_sshfs()
    base = jobs_settings.storage / project
    with sshfs_mount(tmp_path / "nfs", at=base / "b") as mount:
        for root, rel in ((base / "a", ""), (mount.backing, "")):
            for name, age in (("old", 40), ("new", 1)):
                run = root / rel / name
                run.mkdir(parents=True)
                (run / EVENTS).write_bytes(os.urandom(100))
                stamp = time.time() - age * 86400
                os.utime(run / EVENTS, (stamp, stamp))
        jobs_settings.retention_max_age_days = 30
        yield mount


def test_retention_plans_on_a_readable_mount(
    factory: sessionmaker[Session], jobs_settings: Settings, remote_runs: SshfsMount
) -> None:
    [plan] = retention.plan_retention(factory, jobs_settings)
    assert sorted(d.run.path for d in plan.remove) == ["a/old", "b/old"]


def test_retention_refuses_a_listing_that_a_dropped_mount_cut_short(
    factory: sessionmaker[Session], jobs_settings: Settings, remote_runs: SshfsMount
) -> None:
    before = tree_digest(jobs_settings.storage / "vision" / "a")
    remote_runs.drop()  # a/ lists, b/ then fails with ENOTCONN: the listing is partial
    with pytest.raises(StorageUnavailable, match="never decides from a partial listing"):
        retention.plan_retention(factory, jobs_settings)
    with pytest.raises(StorageUnavailable, match="vision could not be listed"):
        retention.plan_retention(factory, jobs_settings, project="vision")
    assert tree_digest(jobs_settings.storage / "vision" / "a") == before  # a/old stays
    assert sorted(os.listdir(remote_runs.backing)) == ["new", "old"]
    with factory() as session:
        assert session.scalars(select(TrashEntry)).all() == []


@pytest.fixture
def target(jobs_settings: Settings, tmp_path: Path) -> Path:
    path = tmp_path / "backup"
    jobs_settings.backup_target = str(path)
    return path


def assert_failed_and_nothing_backed_up(
    factory: sessionmaker[Session], target: Path, error: str
) -> None:
    with factory() as session:
        [run] = session.scalars(select(BackupRun)).all()
        assert run.state == "failed" and error in (run.error or "")
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "backup.failed"))
        assert [error in e.detail["error"] for e in events] == [True]
    assert classify(os.listdir(target))[0] == [] if target.exists() else True


def test_backup_refuses_a_dropped_mount_and_marks_nothing_backed_up(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    remote_runs: SshfsMount,
    target: Path,
) -> None:
    remote_runs.drop()
    with pytest.raises(BackupFailed, match=r"backup did nothing: .*/vision/b cannot be read"):
        backup.run_backup(factory, jobs_settings, actor="t", sleep=lambda _s: None)
    assert_failed_and_nothing_backed_up(factory, target, "backup did nothing")


def test_backup_refuses_a_hung_mount_after_a_bounded_wait(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    remote_runs: SshfsMount,
    target: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backup, "MOUNT_CHECK_WAIT", 1.0)
    remote_runs.hang()
    try:
        with pytest.raises(BackupFailed, match="not answering"):
            backup.run_backup(factory, jobs_settings, actor="t", sleep=lambda _s: None)
    finally:
        remote_runs.resume()
    assert_failed_and_nothing_backed_up(factory, target, "backup did nothing")


def test_backup_of_a_readable_mount_holds_its_runs(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    remote_runs: SshfsMount,
    target: Path,
) -> None:
    report = backup.run_backup(factory, jobs_settings, actor="t")
    assert (target / report.snapshot / "vision" / "b" / "old" / EVENTS).exists()
