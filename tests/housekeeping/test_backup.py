"""Backups with real rsync on real files: snapshots, hard links, faults, verify, restore."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.errors import ConfigError, InvalidInput, NotFound
from tbhub.core.models import AuditEvent, BackupRun
from tbhub.core.settings import Settings
from tbhub.housekeeping import backup
from tbhub.housekeeping.snapshots import classify, parse_name, snapshot_name
from tbhub.housekeeping.targets import Target, TargetUnreachable
from tests.housekeeping.conftest import fill_storage, tree_digest
from tests.ports import free_port

runner = CliRunner()


@pytest.fixture
def target(jobs_settings: Settings, tmp_path: Path) -> Path:
    path = tmp_path / "backup"
    jobs_settings.backup_target = str(path)
    return path


def complete_snapshots(target: Path) -> list[str]:
    return classify(os.listdir(target))[0] if target.exists() else []


def age_by_a_day(target: Path, name: str) -> str:
    """Rename a snapshot as if it had been taken a day earlier; returns the new name."""
    older = snapshot_name(parse_name(name) - timedelta(days=1))  # type: ignore[operator]
    (target / name).rename(target / older)
    (target / f"{name}.sha256").rename(target / f"{older}.sha256")
    return older


def runs_of(factory: sessionmaker[Session]) -> list[BackupRun]:
    with factory() as session:
        return list(session.scalars(select(BackupRun).order_by(BackupRun.id)))


def test_a_snapshot_is_a_copy_with_a_manifest_and_unchanged_files_are_hard_links(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, target: Path
) -> None:
    fill_storage(jobs_settings)
    first = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    assert tree_digest(target / first) == tree_digest(jobs_settings.storage)
    yesterday = age_by_a_day(target, first)  # one snapshot a day is kept
    changed = jobs_settings.storage / "vision" / "g" / "run-0" / "events.out.tfevents.0.host"
    changed.write_bytes(b"new content")
    second = backup.run_backup(factory, jobs_settings, actor="t")
    assert complete_snapshots(target) == [yesterday, second.snapshot]
    assert second.files == 1
    old, new = target / yesterday, target / second.snapshot
    same = old / "vision/g/run-1/events.out.tfevents.0.host"
    assert same.stat().st_ino == (new / "vision/g/run-1/events.out.tfevents.0.host").stat().st_ino
    assert (new / "vision/g/run-0/events.out.tfevents.0.host").read_bytes() == b"new content"
    assert backup.verify(factory, jobs_settings, snapshot=second.snapshot, actor="t")[1] == []
    assert backup.verify(factory, jobs_settings, snapshot=yesterday, actor="t")[1] == []
    assert [r.state for r in runs_of(factory)] == ["complete", "complete"]


def test_trash_is_not_backed_up(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, target: Path
) -> None:
    fill_storage(jobs_settings, runs=1)
    (jobs_settings.storage / ".tbhub-trash" / "1").mkdir(parents=True)
    (jobs_settings.storage / ".tbhub-trash" / "1" / "f").write_bytes(b"x")
    report = backup.run_backup(factory, jobs_settings, actor="t")
    assert not (target / report.snapshot / ".tbhub-trash").exists()


def test_one_flipped_byte_is_reported_by_verify(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, target: Path
) -> None:
    fill_storage(jobs_settings)
    name = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    victim = target / name / "vision/g/run-3/events.out.tfevents.2.host"
    data = bytearray(victim.read_bytes())
    data[1234] ^= 0x01
    victim.write_bytes(bytes(data))
    (target / name / "vision/g/run-1/events.out.tfevents.1.host").unlink()
    assert backup.verify(factory, jobs_settings, snapshot=None, actor="t") == (
        name,
        [
            {"path": "vision/g/run-1/events.out.tfevents.1.host", "problem": "missing"},
            {"path": "vision/g/run-3/events.out.tfevents.2.host", "problem": "changed"},
        ],
    )


def test_verify_from_the_cli_lists_the_file_and_exits_1(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    cli_env: dict[str, str],
) -> None:
    fill_storage(jobs_settings, runs=2)
    name = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    victim = target / name / "vision/g/run-1/events.out.tfevents.0.host"
    victim.write_bytes(b"\x00" + victim.read_bytes()[1:])
    result = runner.invoke(app, ["admin", "backup", "verify"])
    assert result.exit_code == 1
    assert "changed: vision/g/run-1/events.out.tfevents.0.host" in result.stdout
    assert "differ from its manifest" in result.stderr


def test_restore_everything_elsewhere_is_byte_identical(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    tmp_path: Path,
) -> None:
    fill_storage(jobs_settings)
    backup.run_backup(factory, jobs_settings, actor="t")
    report = backup.restore(factory, jobs_settings, into=tmp_path / "elsewhere", actor="t")
    assert tree_digest(tmp_path / "elsewhere") == tree_digest(jobs_settings.storage)
    assert len(report.restored) == 20 and report.kept_newer == []


def test_restore_one_run_never_overwrites_newer_files_without_force(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, target: Path
) -> None:
    fill_storage(jobs_settings)
    backup.run_backup(factory, jobs_settings, actor="t")
    run = jobs_settings.storage / "vision/g/run-2"
    before = tree_digest(run)
    (run / "events.out.tfevents.0.host").unlink()
    newer = run / "events.out.tfevents.1.host"
    newer.write_bytes(b"written after the backup")
    later = time.time() + 60
    os.utime(newer, (later, later))
    report = backup.restore(factory, jobs_settings, project="vision", run="g/run-2", actor="t")
    assert report.restored == ["events.out.tfevents.0.host"]
    assert report.kept_newer == ["events.out.tfevents.1.host"]
    assert newer.read_bytes() == b"written after the backup"
    backup.restore(factory, jobs_settings, project="vision", run="g/run-2", force=True, actor="t")
    assert tree_digest(run) == before


def test_restore_refuses_paths_that_leave_the_storage_root(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, target: Path
) -> None:
    fill_storage(jobs_settings, runs=1)
    backup.run_backup(factory, jobs_settings, actor="t")
    with pytest.raises(InvalidInput, match="must be relative"):
        backup.restore(factory, jobs_settings, project="vision", run="../../etc", actor="t")


def test_restoring_a_run_the_snapshot_lacks_creates_nothing_and_names_snapshots_that_have_it(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    cli_env: dict[str, str],
) -> None:
    fill_storage(jobs_settings, runs=1)
    first = age_by_a_day(target, backup.run_backup(factory, jobs_settings, actor="t").snapshot)
    shutil.rmtree(jobs_settings.storage / "vision/g/run-0")
    second = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    with pytest.raises(NotFound) as refused:
        backup.restore(factory, jobs_settings, snapshot=second, project="vision", run="g/run-0",
                       actor="t")  # fmt: skip
    assert refused.value.message == (
        f"snapshot {second} has no run vision/g/run-0; snapshots that do: {first}"
    )
    assert not (jobs_settings.storage / "vision/g/run-0").exists()
    with pytest.raises(NotFound, match="no complete snapshot holds it"):
        backup.restore(factory, jobs_settings, project="vision", run="g/never", actor="t")
    assert not (jobs_settings.storage / "vision/g/never").exists()
    # The CLI says the same in its one error style, and still creates nothing.
    result = runner.invoke(app, ["admin", "backup", "restore", "--snapshot", second,
                                 "--project", "vision", "--run", "g/run-0"])  # fmt: skip
    assert result.exit_code == 1 and "has no run vision/g/run-0" in result.stderr
    assert not (jobs_settings.storage / "vision/g/run-0").exists()
    # From the snapshot that has it, it comes back.
    backup.restore(factory, jobs_settings, snapshot=first, project="vision", run="g/run-0",
                   actor="t")  # fmt: skip
    assert (jobs_settings.storage / "vision/g/run-0").is_dir()


def test_a_target_whose_parent_is_missing_is_refused_not_created(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, tmp_path: Path
) -> None:
    fill_storage(jobs_settings, runs=1)
    unmounted = tmp_path / "mnt" / "backup-disk"
    jobs_settings.backup_target = str(unmounted / "tbhub")
    with pytest.raises(ConfigError) as refused:
        backup.run_backup(factory, jobs_settings, actor="t")
    assert str(unmounted) in refused.value.message and "mounted" in refused.value.message
    assert not (tmp_path / "mnt").exists()
    unmounted.mkdir(parents=True)  # the disk is mounted: the snapshot directory may be made
    backup.run_backup(factory, jobs_settings, actor="t")
    assert complete_snapshots(unmounted / "tbhub")


KILLED_BACKUP = [sys.executable, "-m", "tbhub", "admin", "backup", "run"]


def test_rsync_killed_midway_leaves_a_partial_that_the_next_run_completes(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    cli_env: dict[str, str],
) -> None:
    fill_storage(jobs_settings, runs=8, files=5, size=100_000)  # 4 MB at 1 MB/s
    env = {**os.environ, **cli_env, "TBHUB_BACKUP_TARGET": str(target),
           "TBHUB_BACKUP_RSYNC_ARGS": '["--bwlimit=1000"]'}  # fmt: skip
    child = subprocess.Popen(KILLED_BACKUP, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        copied: list[Path] = []
        while time.monotonic() < deadline and len(copied) < 3:
            copied = [p for p in target.glob("*.partial/vision/g/*/events*") if p.is_file()]
            time.sleep(0.05)
        assert copied, "rsync never started copying"
        os.killpg(child.pid, signal.SIGKILL)  # tbhub and its rsync, mid-transfer
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert complete_snapshots(target) == []
    [partial] = classify(os.listdir(target))[1]
    assert not (target / f"{partial}.sha256").exists()
    assert [r.state for r in runs_of(factory)] == ["running"]
    report = backup.run_backup(factory, jobs_settings, actor="t")
    assert report.resumed
    assert complete_snapshots(target) == [report.snapshot]
    assert classify(os.listdir(target))[1] == []
    assert tree_digest(target / report.snapshot) == tree_digest(jobs_settings.storage)
    assert backup.verify(factory, jobs_settings, snapshot=None, actor="t")[1] == []
    assert [r.state for r in runs_of(factory)] == ["interrupted", "complete"]


def test_a_full_target_marks_the_run_failed_and_keeps_earlier_snapshots(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    small_tmpfs: Path,
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs_settings.backup_target = str(small_tmpfs / "snapshots")
    monkeypatch.setenv("TBHUB_BACKUP_TARGET", jobs_settings.backup_target)
    fill_storage(jobs_settings, runs=2, files=2, size=50_000)
    first = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    first_content = tree_digest(small_tmpfs / "snapshots" / first)
    fill_storage(jobs_settings, runs=12, files=2, size=50_000)  # 1.2 MB: more than fits
    result = runner.invoke(app, ["admin", "backup", "run"])
    assert result.exit_code == 1
    assert "is full (No space left on device)" in result.stderr
    assert "earlier snapshots are intact" in result.stderr
    assert complete_snapshots(small_tmpfs / "snapshots") == [first]
    assert tree_digest(small_tmpfs / "snapshots" / first) == first_content
    assert backup.verify(factory, jobs_settings, snapshot=first, actor="t")[1] == []
    last = runs_of(factory)[-1]
    assert last.state == "failed" and "is full" in (last.error or "")


def test_an_unreachable_target_is_retried_with_backoff_and_reported(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str
) -> None:
    if shutil.which("ssh") is None:
        pytest.skip("needs the ssh client (apt-get install openssh-client)")
    fill_storage(jobs_settings, runs=1)
    jobs_settings.backup_target = "nobody@127.0.0.1:/nonexistent"
    jobs_settings.backup_ssh_command = (
        f"ssh -p {free_port()} -o BatchMode=yes -o ConnectTimeout=2 "
        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    )
    jobs_settings.backup_retries = 2
    jobs_settings.backup_retry_backoff = 0.5
    waits: list[float] = []
    retried: list[int] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with pytest.raises(TargetUnreachable) as info:
        backup.run_backup(factory, jobs_settings, actor="t", sleep=sleep,
                          on_retry=lambda n, _e: retried.append(n))  # fmt: skip
    assert waits == [0.5, 1.0] and retried == [1, 2]
    assert "Connection refused" in info.value.message
    assert "gave up after 3 attempts" in info.value.message
    [row] = runs_of(factory)
    assert (row.state, row.attempts) == ("failed", 3)
    with factory() as session:
        [event] = session.scalars(select(AuditEvent).where(AuditEvent.action == "backup.failed"))
    assert event.detail["attempts"] == 3


def test_remote_targets_are_parsed_and_local_paths_are_not() -> None:
    remote = Target.parse("backup@nas:/srv/tbhub", "ssh")
    assert (remote.host, remote.root, remote.rsync_path("x")) == (
        "backup@nas", "/srv/tbhub", "backup@nas:/srv/tbhub/x")  # fmt: skip
    local = Target.parse("/mnt/backup", "ssh")
    assert (local.host, local.rsync_path("x")) == (None, "/mnt/backup/x")


def test_backup_without_a_target_says_what_to_set(
    factory: sessionmaker[Session], jobs_settings: Settings
) -> None:
    with pytest.raises(ConfigError, match="TBHUB_BACKUP_TARGET"):
        backup.run_backup(factory, jobs_settings, actor="t")


def test_backup_list_says_how_the_last_run_ended(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    cli_env: dict[str, str],
) -> None:
    fill_storage(jobs_settings, runs=1)
    assert "last run: none yet" in runner.invoke(app, ["admin", "backup", "list"]).stdout
    name = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    listed = runner.invoke(app, ["admin", "backup", "list"])
    assert listed.exit_code == 0
    assert f"last run: complete, to {target}, finished " in listed.stdout, listed.stdout
    assert f"snapshot {name}, 4 files written" in listed.stdout, listed.stdout


def test_restoring_a_run_by_a_path_it_does_not_have_suggests_the_run_paths_that_look_like_it(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    target: Path,
    cli_env: dict[str, str],
) -> None:
    fill_storage(jobs_settings, runs=2)
    backup.run_backup(factory, jobs_settings, actor="t")
    result = runner.invoke(app, ["admin", "backup", "restore", "--project", "vision",
                                 "--run", "run-1"])  # fmt: skip
    assert result.exit_code == 1
    assert "has no run vision/run-1; runs with similar names: g/run-1" in result.stderr
    assert not (jobs_settings.storage / "vision/run-1").exists()
