"""Retention on real files and a real database (SQLite and PostgreSQL): plan, apply,
trash, restore, purge, archive, audit."""

from __future__ import annotations

import os
import tarfile
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import AlreadyExists
from tbhub.core.models import AuditEvent, TrashEntry
from tbhub.core.settings import Settings
from tbhub.housekeeping import retention, trash
from tbhub.housekeeping.config import trash_root
from tbhub.housekeeping.manifest import parse_lines
from tbhub.storage.scan import scan_project
from tests.housekeeping.conftest import EVENTS, MakeRun, tree_digest


def audit_events(factory: sessionmaker[Session], action: str) -> list[AuditEvent]:
    with factory() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def test_scan_finds_runs_with_sizes_and_last_write(jobs_settings: Settings, tmp_path: Path) -> None:
    project = jobs_settings.storage / "p"
    (project / "a" / "train").mkdir(parents=True)
    (project / "a" / "train" / EVENTS).write_bytes(b"1234")
    (project / "a" / "validation").mkdir()
    (project / "a" / "validation" / EVENTS).write_bytes(b"12")
    (project / "nested" / "inner").mkdir(parents=True)
    (project / "nested" / EVENTS).write_bytes(b"1")
    (project / "nested" / "inner" / EVENTS).write_bytes(b"123")
    (project / "no-events").mkdir()
    (project / "no-events" / "notes").write_bytes(b"12345")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / EVENTS).write_bytes(b"x" * 1000)
    (project / "linked").symlink_to(outside)
    os.utime(project / "a" / "train" / EVENTS, (1000.0, 1000.0))
    os.utime(project / "a" / "validation" / EVENTS, (2000.0, 2000.0))
    found = {r.path: (r.bytes, r.files, r.last_write) for r in scan_project(project, "p")}
    assert found["a/train"] == (4, 1, 1000.0)
    assert found["a/validation"] == (2, 1, 2000.0)
    assert found["nested"][:2] == (4, 2)  # the inner run belongs to the outer one
    assert set(found) == {"a/train", "a/validation", "nested"}  # no symlink, no event-less dir


def test_plan_is_a_dry_run_with_counts_and_bytes(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    make_run(project, "g/new", age_days=1, size=100)
    make_run(project, "g/old", age_days=40, size=300)
    before = tree_digest(jobs_settings.storage)
    jobs_settings.retention_max_age_days = 30
    [plan] = retention.plan_retention(factory, jobs_settings)
    assert [d.run.path for d in plan.remove] == ["g/old"]
    assert (plan.remove_bytes, plan.kept_runs, plan.kept_bytes) == (310, 1, 110)
    assert tree_digest(jobs_settings.storage) == before
    with factory() as session:
        assert session.scalars(select(TrashEntry)).all() == []


def test_apply_moves_runs_out_of_the_board_logdir_and_audits_bytes(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    old = make_run(project, "g/old", age_days=40, size=300)
    content = tree_digest(old)
    make_run(project, "g/new", age_days=1)
    jobs_settings.retention_max_age_days = 30
    plans = retention.plan_retention(factory, jobs_settings)
    report = retention.apply_plans(factory, jobs_settings, plans, actor="alice")
    assert (report.trashed, report.bytes) == (1, 310)
    assert not old.exists()
    assert [r.path for r in scan_project(jobs_settings.storage / project, project)] == ["g/new"]
    [entry] = trash.list_trash(factory())
    moved_to = trash_root(jobs_settings) / str(entry.id) / "old"
    assert tree_digest(moved_to) == content
    assert not moved_to.resolve().is_relative_to((jobs_settings.storage / project).resolve())
    [event] = audit_events(factory, "retention.trash")
    assert (event.actor, event.target, event.detail["bytes"]) == ("alice", "vision/g/old", 310)


def test_restore_brings_a_trashed_run_back_byte_identical(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "deep/group/old", age_days=40)
    content = tree_digest(run)
    jobs_settings.retention_keep_last = 0
    jobs_settings.retention_max_age_days = 30
    retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    entry = trash.restore(factory, jobs_settings, "vision/deep/group/old", actor="bob")
    assert tree_digest(run) == content
    assert not (trash_root(jobs_settings) / str(entry.id)).exists()
    with factory() as session:
        assert session.get_one(TrashEntry, entry.id).state == "restored"
    [event] = audit_events(factory, "trash.restore")
    assert (event.actor, event.detail["bytes"]) == ("bob", 110)


def test_restore_recreates_missing_parent_directories(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "gone/old", age_days=40)
    jobs_settings.retention_max_age_days = 30
    retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    (jobs_settings.storage / project / "gone").rmdir()
    trash.restore(factory, jobs_settings, "vision/gone/old", actor="t")
    assert (run / EVENTS).is_file()


def test_restore_never_replaces_a_run_that_came_back(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    make_run(project, "g/old", age_days=40)
    jobs_settings.retention_max_age_days = 30
    retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    newer = make_run(project, "g/old", age_days=0, size=7)
    newer_content = tree_digest(newer)
    [entry] = trash.list_trash(factory())
    with pytest.raises(AlreadyExists, match="move it away"):
        trash.restore(factory, jobs_settings, str(entry.id), actor="t")
    assert tree_digest(newer) == newer_content
    assert [e.id for e in trash.list_trash(factory())] == [entry.id]  # still restorable


def test_purge_deletes_only_entries_past_the_grace_period(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    make_run(project, "g/a", age_days=40)
    make_run(project, "g/b", age_days=50)
    jobs_settings.retention_max_age_days = 30
    retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    first, second = trash.list_trash(factory())
    with transaction(factory) as session:  # pretend the first was trashed 8 days ago
        session.get_one(TrashEntry, first.id).trashed_at = retention.utc(time.time() - 8 * 86400)
    report = trash.purge(factory, jobs_settings, older_than_days=7, actor="janitor")
    assert (report.entries, report.bytes) == (1, 110)
    assert not (trash_root(jobs_settings) / str(first.id)).exists()
    assert (trash_root(jobs_settings) / str(second.id) / "a").is_dir()
    [event] = audit_events(factory, "trash.purge")
    assert (event.actor, event.detail["bytes"]) == ("janitor", 110)
    assert trash.purge(factory, jobs_settings, older_than_days=0, actor="t").entries == 1


def test_archive_writes_a_verified_tarball_and_manifest_then_deletes_the_run(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "g/old", age_days=40, size=5000)
    content = tree_digest(run)
    jobs_settings.retention_max_age_days = 30
    jobs_settings.retention_action = "archive"
    report = retention.apply_plans(
        factory, jobs_settings, retention.plan_retention(factory, jobs_settings), actor="t"
    )
    assert report.archived == 1
    assert not run.exists()
    with factory() as session:
        entry = session.scalars(select(TrashEntry)).one()
    assert entry.state == "archived" and entry.archive_path
    tarball = Path(entry.archive_path)
    manifest = dict(parse_lines(Path(f"{tarball}.sha256").read_text().splitlines()))
    assert manifest == {f"old/{path}": digest for path, digest in content.items()}
    with tarfile.open(tarball) as tar:
        names = {m.name for m in tar if m.isfile()}
    assert names == set(manifest)
    assert not (trash_root(jobs_settings) / str(entry.id)).exists()
    [event] = audit_events(factory, "retention.archive")
    assert event.detail["archive"] == str(tarball)


def test_project_override_and_pins_change_the_plan(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    for i in range(4):
        make_run(project, f"r{i}", age_days=i + 1)
    jobs_settings.retention_keep_last = 10
    with transaction(factory) as session:
        retention.set_override(session, project=project, values={"keep_last": 2}, actor="o")
        retention.pin_run(session, jobs_settings, project=project, run_path="r3", actor="o")
    [plan] = retention.plan_retention(factory, jobs_settings)
    assert [d.run.path for d in plan.remove] == ["r2"]
    assert plan.skipped_pinned == 1
    with transaction(factory) as session:
        shown = retention.describe_policy(session, jobs_settings, project=project)
    assert shown["effective"]["keep_last"] == 2 and shown["pinned"] == ["r3"]


def test_a_run_written_after_the_plan_is_left_alone(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    run = make_run(project, "g/old", age_days=40)
    jobs_settings.retention_max_age_days = 30
    plans = retention.plan_retention(factory, jobs_settings)
    (run / "events.out.tfevents.1800000000.host").write_bytes(b"fresh")
    report = retention.apply_plans(factory, jobs_settings, plans, actor="t")
    assert report.trashed == 0
    assert report.skipped == [
        {"run": "vision/g/old", "why": "it was written to after the plan was made"}
    ]
    assert (run / EVENTS).is_file()


def test_plan_over_several_projects_scans_each_one(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    from tbhub.domain.projects import create_project

    with transaction(factory) as session:
        for name in ("audio", "text"):
            create_project(session, name=name, storage_root=jobs_settings.storage, owner=None,
                           actor="t")  # fmt: skip
    for name, age in (("vision", 40), ("audio", 50), ("text", 1)):
        make_run(name, f"{name}-run", age_days=age)
    jobs_settings.retention_max_age_days = 30
    plans = retention.plan_retention(factory, jobs_settings)  # several projects: worker processes
    assert {p.project: [d.run.path for d in p.remove] for p in plans} == {
        "audio": ["audio-run"], "text": [], "vision": ["vision-run"]}  # fmt: skip


def test_plan_from_a_threaded_server_scans_in_spawned_workers(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str, make_run: MakeRun
) -> None:
    import threading

    from tbhub.domain.projects import create_project

    with transaction(factory) as session:
        create_project(session, name="audio", storage_root=jobs_settings.storage, owner=None,
                       actor="t")  # fmt: skip
    make_run("vision", "old", age_days=40)
    make_run("audio", "old", age_days=40)
    jobs_settings.retention_max_age_days = 30
    result: list[object] = []
    worker = threading.Thread(  # two threads alive: forking would be unsafe, so it spawns
        target=lambda: result.append(retention.plan_retention(factory, jobs_settings))
    )
    worker.start()
    worker.join(60)
    [plans] = result
    assert {p.project: len(p.remove) for p in plans} == {"audio": 1, "vision": 1}  # type: ignore[attr-defined]
