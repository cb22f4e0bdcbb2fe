"""The trash, for operators: list it, restore a run to where it was, purge old entries."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import AlreadyExists, InvalidInput, NotFound
from tbhub.core.models import RetentionState, Run, TrashEntry
from tbhub.core.settings import Settings
from tbhub.domain import audit
from tbhub.domain.projects import get_project
from tbhub.domain.runs import note_event
from tbhub.housekeeping.config import job_lock
from tbhub.housekeeping.journal import (
    finish_purge,
    leaf_of,
    open_entry_dir,
    recover,
    settle_restore,
    utc,
)
from tbhub.housekeeping.retention import trash_one
from tbhub.storage.fsops import exists, move, parent_of, require_safe_rmtree, split_relative
from tbhub.storage.paths import project_dir


def list_trash(session: Session) -> list[TrashEntry]:
    query = select(TrashEntry).where(TrashEntry.state == "trashed").order_by(TrashEntry.id)
    return list(session.scalars(query))


def project_trash(
    session: Session, *, project: str, entry_id: int | None = None
) -> list[TrashEntry]:
    """A project's runs in the trash (or the one with `entry_id`). Trash outlives projects
    (entries keep a name, not a key), so entries made before this project was created
    belong to a deleted project of the same name: never this project's to see or restore."""
    row = get_project(session, name=project)
    query = (
        select(TrashEntry)
        .where(TrashEntry.project == project, TrashEntry.state == "trashed")
        .where(TrashEntry.created_at >= row.created_at)
        .order_by(TrashEntry.id)
    )
    if entry_id is not None:
        query = query.where(TrashEntry.id == entry_id)
    return list(session.scalars(query))


def describe_entry(entry: TrashEntry, settings: Settings) -> dict[str, Any]:
    """A trashed run as the CLI, the API and the retention page show it."""
    grace = timedelta(days=settings.trash_grace_days)
    return {
        "id": entry.id,
        "project": entry.project,
        "run_path": entry.run_path,
        "run": f"{entry.project}/{entry.run_path}",
        "bytes": entry.bytes,
        "files": entry.files,
        "reasons": entry.reasons,
        "trashed_by": entry.actor,
        "trashed_at": entry.trashed_at,
        "purge_after": entry.trashed_at + grace if entry.trashed_at else None,
    }


def restore_in_project(
    factory: sessionmaker[Session], settings: Settings, *, project: str, entry_id: int, actor: str
) -> TrashEntry:
    """Restore one of a project's trashed runs (see project_trash for which are its own)."""
    with factory() as session:
        if not project_trash(session, project=project, entry_id=entry_id):
            raise NotFound(f"{project} has no run with trash id {entry_id} in the trash; list "
                           f"them with GET /api/v1/projects/{project}/trash")  # fmt: skip
    return restore(factory, settings, str(entry_id), actor=actor)


def find_entry(session: Session, ref: str) -> TrashEntry:
    """A trashed run by its trash id, or by `project/run path` (the latest one trashed)."""
    if ref.isdigit():
        entry = session.get(TrashEntry, int(ref))
    else:
        project, _, run_path = ref.partition("/")
        entry = session.scalar(
            select(TrashEntry)
            .where(TrashEntry.project == project, TrashEntry.run_path == run_path)
            .where(TrashEntry.state == "trashed")
            .order_by(TrashEntry.id.desc())
            .limit(1)
        )
    if entry is None or entry.state != "trashed":
        raise NotFound(
            f"nothing in the trash matches {ref!r}; see `tbhub admin trash list` for ids"
        )
    return entry


def restore(
    factory: sessionmaker[Session], settings: Settings, ref: str, *, actor: str
) -> TrashEntry:
    """Move a trashed run back to `<project>/<run path>`; refuses to replace anything there."""
    require_safe_rmtree()
    with job_lock(settings, "retention"):
        recover(factory, settings, actor=actor)
        with transaction(factory) as session:
            entry = find_entry(session, ref)
            entry.state = "restoring"
        parts = split_relative(entry.run_path)
        leaf = leaf_of(entry)
        try:
            project_dir(settings.storage, entry.project)
            with parent_of(settings.storage, [entry.project, *parts], create=True) as parent_fd:
                if exists(parent_fd, leaf):
                    raise AlreadyExists(
                        f"{entry.project}/{entry.run_path} exists again; move it away, then restore"
                    )
                entry_fd = open_entry_dir(settings, entry.id)
                try:
                    move(entry_fd, leaf, parent_fd, leaf)
                finally:
                    os.close(entry_fd)
        finally:
            settle_restore(factory, settings, entry.id, actor=actor)
    return entry


@dataclass
class PurgeReport:
    entries: int = 0
    bytes: int = 0


def purge(
    factory: sessionmaker[Session], settings: Settings, *, older_than_days: float, actor: str
) -> PurgeReport:
    """Delete for good the runs trashed more than `older_than_days` days ago."""
    if older_than_days < 0:
        raise InvalidInput("--older-than must be 0 or more days")
    require_safe_rmtree()
    report = PurgeReport()
    cutoff = utc(time.time() - older_than_days * 86400)
    with job_lock(settings, "retention"):
        recover(factory, settings, actor=actor)
        with transaction(factory) as session:
            entries = list(
                session.scalars(
                    select(TrashEntry)
                    .where(TrashEntry.state == "trashed", TrashEntry.trashed_at <= cutoff)
                    .order_by(TrashEntry.id)
                )
            )
            for entry in entries:
                entry.state = "purging"
            ids = [(e.id, e.bytes) for e in entries]
        for entry_id, size in ids:
            finish_purge(factory, settings, entry_id, actor=actor)
            report.entries += 1
            report.bytes += size
    return report


def trash_run(
    factory: sessionmaker[Session], settings: Settings, *, project: str, run_id: int, actor: str
) -> None:
    """DELETE of a registered run: its directory goes to the trash (the journal marks the run
    trashed); a run whose directory is gone already is marked purged."""
    with factory() as session:
        run_path = session.get_one(Run, run_id).path
    if trash_one(factory, settings, project=project, run_path=run_path, actor=actor) is None:
        with transaction(factory) as session:
            run = session.get_one(Run, run_id)
            note_event(session, run, "retention", RetentionState.purged.value, actor=actor)
            run.retention_state = RetentionState.purged
            audit.record(session, actor=actor, action="run.delete", target=f"{project}/{run_path}",
                         gone=True)  # fmt: skip


def trash_totals(session: Session) -> tuple[int, int]:
    """(runs, bytes) in the trash, for /metrics and the admin console."""
    count, size = session.execute(
        select(func.count(), func.coalesce(func.sum(TrashEntry.bytes), 0)).where(
            TrashEntry.state == "trashed"
        )
    ).one()
    return int(count), int(size)
