"""The trash journal: each TrashEntry's state is committed before its step on disk.

    trash:    moving -> trashed -> (restoring -> restored | purging -> purged)
    archive:  archiving -> staged -> archived      (tar.gz verified, rename, then delete)

A run leaves its project only by one atomic rename into `<trash>/<id>/`, so whether that
directory holds it says whether the move happened. Only `<trash>/<id>/` is ever deleted, and
it belongs to one entry alone: a rerun after a crash finishes a step, and can never delete
anything twice (recover()).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import TrashEntry
from tbhub.core.settings import Settings
from tbhub.domain import audit
from tbhub.domain.runs import mark_retention
from tbhub.housekeeping.archive import archive_paths, partial_path
from tbhub.housekeeping.config import archive_root, trash_root
from tbhub.storage.fsops import is_real_dir, move, open_below, open_dir, remove_tree, split_relative

ENTRY_META = ".tbhub-entry.json"
IN_FLIGHT = ("moving", "archiving", "staged", "restoring", "purging")


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def leaf_of(entry: TrashEntry) -> str:
    return split_relative(entry.run_path)[-1]


def move_into_trash(
    settings: Settings, entry_id: int, parent_fd: int, leaf: str, target: str
) -> None:
    """Rename `leaf` (in `parent_fd`) to `<trash>/<id>/<leaf>`, with a note of where it was."""
    trash_fd = open_dir(trash_root(settings))
    try:
        os.mkdir(str(entry_id), 0o700, dir_fd=trash_fd)
        entry_fd = open_below(trash_fd, [str(entry_id)])
    finally:
        os.close(trash_fd)
    try:
        meta = os.open(ENTRY_META, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=entry_fd)
        with os.fdopen(meta, "w") as fh:
            json.dump({"id": entry_id, "run": target}, fh)
        move(parent_fd, leaf, entry_fd, leaf)
    finally:
        os.close(entry_fd)


def open_entry_dir(settings: Settings, entry_id: int) -> int:
    trash_fd = open_dir(trash_root(settings))
    try:
        return open_below(trash_fd, [str(entry_id)])
    finally:
        os.close(trash_fd)


def delete_entry_dir(settings: Settings, entry_id: int) -> None:
    """Delete `<trash>/<id>/`, the one place tbhub ever deletes a run from."""
    trash_fd = open_dir(trash_root(settings))
    try:
        remove_tree(trash_fd, str(entry_id))
    finally:
        os.close(trash_fd)


def in_trash(settings: Settings, entry: TrashEntry) -> bool:
    """Does `<trash>/<id>/<leaf>` exist, i.e. did the move happen?"""
    try:
        entry_fd = open_entry_dir(settings, entry.id)
    except FileNotFoundError:
        return False
    try:
        return is_real_dir(entry_fd, leaf_of(entry))
    finally:
        os.close(entry_fd)


def settle(
    factory: sessionmaker[Session], entry_id: int, state: str, *, actor: str, action: str
) -> None:
    """Commit an entry's final state for a step, with its audit event (who, what, bytes)."""
    with transaction(factory) as session:
        entry = session.get_one(TrashEntry, entry_id)
        entry.state = state
        if state == "trashed":
            entry.trashed_at = utc(time.time())
        else:
            entry.finished_at = utc(time.time())
        mark_retention(
            session,
            project=entry.project,
            run_path=entry.run_path,
            journal_state=state,
            trash_id=entry.id,
            actor=actor,
        )
        audit.record(
            session,
            actor=actor,
            action=action,
            target=f"{entry.project}/{entry.run_path}",
            bytes=entry.bytes,
            files=entry.files,
            reasons=entry.reasons,
            trash_id=entry.id,
            archive=entry.archive_path,
        )


def finish_trash(factory: sessionmaker[Session], entry_id: int, *, actor: str) -> None:
    settle(factory, entry_id, "trashed", actor=actor, action="retention.trash")


def finish_archive(
    factory: sessionmaker[Session], settings: Settings, entry_id: int, *, actor: str
) -> None:
    """The archive is verified and the run sits in `<trash>/<id>/`: delete it there."""
    with transaction(factory) as session:
        entry = session.get_one(TrashEntry, entry_id)
        entry.state = "staged"
        tarball, _ = archive_paths(archive_root(settings), entry.project, entry.id, leaf_of(entry))
        entry.archive_path = str(tarball)
    delete_entry_dir(settings, entry_id)
    settle(factory, entry_id, "archived", actor=actor, action="retention.archive")


def abandon(factory: sessionmaker[Session], settings: Settings, entry_id: int, why: str) -> None:
    """The run never left its place: drop the half-made trash dir and archive, keep the run."""
    with transaction(factory) as session:
        entry = session.get_one(TrashEntry, entry_id)
        for path in archive_paths(archive_root(settings), entry.project, entry_id, leaf_of(entry)):
            path.unlink(missing_ok=True)
            partial_path(path).unlink(missing_ok=True)
        delete_entry_dir(settings, entry_id)  # holds at most the metadata file
        entry.state, entry.error, entry.finished_at = "abandoned", why, utc(time.time())


def settle_restore(
    factory: sessionmaker[Session], settings: Settings, entry_id: int, *, actor: str
) -> bool:
    """After a restore attempt: True (restored) if the run left the trash, else back to
    `trashed` so it can be tried again."""
    with factory() as session:
        moved_back = not in_trash(settings, session.get_one(TrashEntry, entry_id))
    if not moved_back:
        with transaction(factory) as session:
            session.get_one(TrashEntry, entry_id).state = "trashed"
        return False
    delete_entry_dir(settings, entry_id)  # only the metadata file is left
    settle(factory, entry_id, "restored", actor=actor, action="trash.restore")
    return True


def finish_purge(
    factory: sessionmaker[Session], settings: Settings, entry_id: int, *, actor: str
) -> None:
    delete_entry_dir(settings, entry_id)
    settle(factory, entry_id, "purged", actor=actor, action="trash.purge")


def recover(factory: sessionmaker[Session], settings: Settings, *, actor: str) -> int:
    """Finish every step a crash interrupted; returns how many entries it settled."""
    with factory() as session:
        pending = list(session.scalars(select(TrashEntry).where(TrashEntry.state.in_(IN_FLIGHT))))
    for entry in pending:
        if entry.state == "moving":
            if in_trash(settings, entry):
                finish_trash(factory, entry.id, actor=actor)
            else:
                abandon(factory, settings, entry.id, "interrupted before the move")
        elif entry.state == "archiving":
            if in_trash(settings, entry):
                finish_archive(factory, settings, entry.id, actor=actor)
            else:
                abandon(factory, settings, entry.id, "interrupted before the move")
        elif entry.state == "staged":
            finish_archive(factory, settings, entry.id, actor=actor)
        elif entry.state == "restoring":
            settle_restore(factory, settings, entry.id, actor=actor)
        elif entry.state == "purging":
            finish_purge(factory, settings, entry.id, actor=actor)
    remove_partial_archives(factory, settings)
    return len(pending)


def remove_partial_archives(factory: sessionmaker[Session], settings: Settings) -> None:
    """Partial tarballs of skipped archive entries (left by a failed write before this was
    cleaned up at once) would keep a full archive disk full: remove them."""
    with factory() as session:
        skipped = session.scalars(
            select(TrashEntry).where(TrashEntry.state == "skipped", TrashEntry.action == "archive")
        ).all()
    for entry in skipped:
        for path in archive_paths(archive_root(settings), entry.project, entry.id, leaf_of(entry)):
            partial_path(path).unlink(missing_ok=True)
