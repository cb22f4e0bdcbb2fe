"""Retention safety on real files: symlinks swapped in, crashes mid-apply, unsafe settings."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import ConfigError
from tbhub.core.models import TrashEntry
from tbhub.core.settings import Settings
from tbhub.housekeeping import archive, retention, trash
from tbhub.housekeeping.config import trash_root
from tbhub.storage.fsops import remove_tree
from tests.housekeeping.conftest import MakeRun, tree_digest


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the storage root that must never be touched."""
    path = tmp_path / "precious"
    (path / "sub").mkdir(parents=True)
    (path / "events.out.tfevents.1.host").write_bytes(b"not yours")
    (path / "sub" / "data").write_bytes(b"keep me")
    return path


def plan_old_runs(factory: sessionmaker[Session], settings: Settings) -> list:
    settings.retention_max_age_days = 30
    return retention.plan_retention(factory, settings)


def test_run_swapped_for_a_symlink_after_the_plan_touches_nothing_outside(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    outside: Path,
) -> None:
    run = make_run(project, "g/old", age_days=40)
    plans = plan_old_runs(factory, jobs_settings)
    before = tree_digest(outside)
    shutil.rmtree(run)
    run.symlink_to(outside)
    report = retention.apply_plans(factory, jobs_settings, plans, actor="t")
    assert report.trashed == 0 and "symlink" in report.skipped[0]["why"]
    assert tree_digest(outside) == before
    assert run.is_symlink() and run.resolve() == outside.resolve()
    trash.purge(factory, jobs_settings, older_than_days=0, actor="t")
    assert tree_digest(outside) == before


def test_parent_directory_swapped_for_a_symlink_is_not_followed(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    outside: Path,
) -> None:
    make_run(project, "g/sub", age_days=40)
    plans = plan_old_runs(factory, jobs_settings)
    before = tree_digest(outside)
    shutil.rmtree(jobs_settings.storage / project / "g")
    (jobs_settings.storage / project / "g").symlink_to(outside)  # g/sub now means precious/sub
    report = retention.apply_plans(factory, jobs_settings, plans, actor="t")
    assert report.trashed == 0 and "refusing to follow" in report.skipped[0]["why"]
    assert tree_digest(outside) == before


def test_a_project_directory_that_is_a_symlink_out_of_the_root_is_refused(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    outside: Path,
) -> None:
    make_run(project, "old", age_days=40)
    plans = plan_old_runs(factory, jobs_settings)
    before = tree_digest(outside)
    shutil.rmtree(jobs_settings.storage / project)
    (jobs_settings.storage / project).symlink_to(outside)
    report = retention.apply_plans(factory, jobs_settings, plans, actor="t")
    assert report.trashed == 0 and "is a symlink" in report.skipped[0]["why"]
    assert tree_digest(outside) == before


def test_deletion_refuses_to_run_without_symlink_safe_rmtree(
    monkeypatch: pytest.MonkeyPatch, jobs_settings: Settings, outside: Path
) -> None:
    monkeypatch.setattr(shutil.rmtree, "avoids_symlink_attacks", False)
    fd = os.open(outside.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ConfigError, match="refuses to delete"):
            remove_tree(fd, outside.name)
    finally:
        os.close(fd)
    assert outside.is_dir()


def test_a_trash_root_inside_a_project_is_refused(jobs_settings: Settings) -> None:
    jobs_settings.trash_root = jobs_settings.storage / "vision" / "trash"
    with pytest.raises(ConfigError, match="board would show"):
        trash_root(jobs_settings)


# -- crashes: every state a crash can leave, then a rerun -------------------------------


def journal_row(
    factory: sessionmaker[Session], state: str, run_path: str, action: str = "trash"
) -> int:
    with transaction(factory) as session:
        entry = TrashEntry(project="vision", run_path=run_path, action=action, state=state,
                           bytes=110, files=2, reasons=["max_age"], actor="t")  # fmt: skip
        session.add(entry)
        session.flush()
        return entry.id


def state_of(factory: sessionmaker[Session], entry_id: int) -> str:
    with factory() as session:
        return session.get_one(TrashEntry, entry_id).state


def test_crash_after_the_move_is_finished_by_a_rerun(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "g/old", age_days=40)
    content = tree_digest(run)
    entry_id = journal_row(factory, "moving", "g/old")
    (trash_root(jobs_settings) / str(entry_id)).mkdir()
    run.rename(trash_root(jobs_settings) / str(entry_id) / "old")  # moved, then the crash
    retention.apply_plans(factory, jobs_settings, plan_old_runs(factory, jobs_settings), actor="t")
    assert state_of(factory, entry_id) == "trashed"
    assert tree_digest(trash_root(jobs_settings) / str(entry_id) / "old") == content
    with factory() as session:
        assert len(session.scalars(select(TrashEntry)).all()) == 1  # not planned a second time


def test_crash_before_the_move_leaves_the_run_for_the_rerun_to_trash(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "g/old", age_days=40)
    content = tree_digest(run)
    entry_id = journal_row(factory, "moving", "g/old")
    (trash_root(jobs_settings) / str(entry_id)).mkdir()  # the crash came before the rename
    report = retention.apply_plans(
        factory, jobs_settings, plan_old_runs(factory, jobs_settings), actor="t"
    )
    assert state_of(factory, entry_id) == "abandoned"
    assert report.trashed == 1 and not run.exists()
    [entry] = trash.list_trash(factory())
    assert tree_digest(trash_root(jobs_settings) / str(entry.id) / "old") == content


def test_crash_while_purging_finishes_the_purge_and_nothing_else(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    make_run(project, "g/old", age_days=40)
    retention.apply_plans(factory, jobs_settings, plan_old_runs(factory, jobs_settings), actor="t")
    [entry] = trash.list_trash(factory())
    with transaction(factory) as session:
        session.get_one(TrashEntry, entry.id).state = "purging"
    half = trash_root(jobs_settings) / str(entry.id) / "old"
    next(half.iterdir()).unlink()  # the crash came mid-delete
    reborn = make_run(project, "g/old", age_days=0)  # a new run at the same path since
    reborn_content = tree_digest(reborn)
    retention.apply_plans(factory, jobs_settings, plan_old_runs(factory, jobs_settings), actor="t")
    assert state_of(factory, entry.id) == "purged"
    assert not (trash_root(jobs_settings) / str(entry.id)).exists()
    assert tree_digest(reborn) == reborn_content


def test_crash_after_archiving_deletes_the_staged_copy_once(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "g/old", age_days=40)
    entry_id = journal_row(factory, "archiving", "g/old", action="archive")
    (trash_root(jobs_settings) / str(entry_id)).mkdir()
    run.rename(trash_root(jobs_settings) / str(entry_id) / "old")
    reborn = make_run(project, "g/old", age_days=0)
    reborn_content = tree_digest(reborn)
    retention.apply_plans(factory, jobs_settings, [], actor="t")
    assert state_of(factory, entry_id) == "archived"
    assert not (trash_root(jobs_settings) / str(entry_id)).exists()
    assert tree_digest(reborn) == reborn_content


APPLY_SCRIPT = """
import sys
from tbhub.core.db import make_engine, make_session_factory
from tbhub.housekeeping import retention
from tbhub.core.settings import Settings
settings = Settings(data_dir=sys.argv[1], storage_root=sys.argv[2], database_url=sys.argv[3],
                    retention_max_age_days=30, retention_active_minutes=0)
factory = make_session_factory(make_engine(settings.db_url))
plans = retention.plan_retention(factory, settings)
print("planned", flush=True)
retention.apply_plans(factory, settings, plans, actor="killed")
"""


def test_apply_killed_midway_then_rerun_moves_every_run_exactly_once(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    tmp_path: Path,
) -> None:
    runs = [make_run(project, f"g/r{i:03d}", age_days=40, size=20) for i in range(150)]
    everything = {str(r.relative_to(jobs_settings.storage)): tree_digest(r) for r in runs}
    child = subprocess.Popen(
        [sys.executable, "-c", APPLY_SCRIPT, str(jobs_settings.data_dir),
         str(jobs_settings.storage), jobs_settings.db_url],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == b"planned\n"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with factory() as session:
                if len(session.scalars(select(TrashEntry)).all()) >= 10:
                    break
            time.sleep(0.005)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()  # type: ignore[union-attr]
    with factory() as session:
        states_after_kill = [e.state for e in session.scalars(select(TrashEntry))]
    assert 0 < len(states_after_kill) < 150, "the kill should land mid-apply"
    retention.apply_plans(factory, jobs_settings, plan_old_runs(factory, jobs_settings), actor="t")
    with factory() as session:
        entries = list(session.scalars(select(TrashEntry)))
    trashed = [e for e in entries if e.state == "trashed"]
    assert {e.state for e in entries} <= {"trashed", "abandoned"}
    assert sorted(f"vision/{e.run_path}" for e in trashed) == sorted(everything)
    for entry in trashed:
        moved = trash_root(jobs_settings) / str(entry.id) / entry.run_path.split("/")[-1]
        assert tree_digest(moved) == everything[f"vision/{entry.run_path}"]
    assert not any(r.exists() for r in runs)


def archive_settings(settings: Settings, root: Path) -> Settings:
    settings.retention_max_age_days = 30
    settings.retention_action = "archive"
    settings.archive_root = root
    return settings


def partial_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.partial"))


def test_an_archive_that_does_not_read_back_keeps_the_run_and_apply_goes_on(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = archive_settings(jobs_settings, tmp_path / "archive")
    first = make_run(project, "g/a", age_days=50, size=200_000)
    make_run(project, "g/b", age_days=40, size=200_000)
    before = tree_digest(first)
    real_pack = archive._pack
    calls: list[Path] = []

    def pack_then_damage(parent_fd: int, name: str, partial: Path) -> dict[str, str]:
        sums = real_pack(parent_fd, name, partial)
        calls.append(partial)
        if len(calls) == 1:  # the disk corrupts the first tarball before its read-back
            with open(partial, "r+b") as fh:
                fh.seek(partial.stat().st_size // 2)
                fh.write(b"\0" * 4096)
        return sums

    monkeypatch.setattr(archive, "_pack", pack_then_damage)
    report = retention.apply_plans(factory, settings, retention.plan_retention(factory, settings),
                                   actor="t")  # fmt: skip
    assert len(calls) == 2
    assert report.archived == 1
    [skipped] = report.skipped
    assert skipped["run"] == f"{project}/g/a"
    assert skipped["why"].startswith("archive failed, run kept")
    assert tree_digest(first) == before
    assert not (jobs_settings.storage / project / "g" / "b").exists()
    assert partial_files(tmp_path / "archive") == []
    assert [p.name for p in (tmp_path / "archive" / project).glob("*.tar.gz")] == [
        f"{entry_id(factory, 'g/b')}-b.tar.gz"
    ]


def entry_id(factory: sessionmaker[Session], run_path: str) -> int:
    with factory() as session:
        return session.scalars(select(TrashEntry.id).where(TrashEntry.run_path == run_path)).one()


def test_a_full_archive_disk_leaves_no_partial_tarball_so_later_archives_fit(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    small_tmpfs: Path,
) -> None:
    settings = archive_settings(jobs_settings, small_tmpfs)
    big = make_run(project, "g/big", age_days=50, size=3_000_000)  # random: does not compress
    make_run(project, "g/small", age_days=40, size=300_000)
    report = retention.apply_plans(factory, settings, retention.plan_retention(factory, settings),
                                   actor="t")  # fmt: skip
    [skipped] = report.skipped
    assert skipped["run"] == f"{project}/g/big" and "No space left" in skipped["why"]
    assert big.is_dir()
    assert partial_files(small_tmpfs) == []
    assert report.archived == 1  # the smaller run still fits after the failed one


def test_recovery_removes_partial_tarballs_of_skipped_archive_entries(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, tmp_path: Path
) -> None:
    settings = archive_settings(jobs_settings, tmp_path / "archive")
    with transaction(factory) as session:
        entry = TrashEntry(project=project, run_path="g/old", action="archive", state="skipped",
                           bytes=1, files=1, reasons=[], actor="t")  # fmt: skip
        session.add(entry)
        session.flush()
        left = tmp_path / "archive" / project / f"{entry.id}-old.tar.gz.partial"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"x" * 1000)
    retention.apply_plans(factory, settings, [], actor="t")
    assert not left.exists()
