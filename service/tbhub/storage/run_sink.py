"""The watcher's sink: what it saw on the storage, written into the runs table.

A directory that got event files and has no row becomes a `discovered` run; every present
run, registered through the API or discovered, gets its bytes, files and last write. Runs
that left the disk keep their rows: retention marks the ones it moved (runs.mark_retention).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.db import transaction
from tbhub.jobs.scan import RunInfo
from tbhub.models import Project, Run, RunSource, RunStatus
from tbhub.runs import note_event
from tbhub.storage.watcher import ProjectChanges

log = logging.getLogger("tbhub.watcher")

ACTOR = "watcher"
MAX_PATH = Run.__table__.c.path.type.length  # type: ignore[attr-defined]
MAX_NAME = Run.__table__.c.name.type.length  # type: ignore[attr-defined]
MAX_GROUP = Run.__table__.c.group_name.type.length  # type: ignore[attr-defined]
IN_BATCH = 500  # paths per IN (...) query


def _utc(ts: float) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts > 0 else None


class DatabaseRunSink:
    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory

    def record(self, changes: list[ProjectChanges]) -> None:
        """All changes in one transaction: a failure leaves nothing half-recorded."""
        changes = [c for c in changes if c.runs]
        if not changes:
            return
        with transaction(self.factory) as session:
            names = [c.project for c in changes]
            query = select(Project.name, Project.id).where(Project.name.in_(names))
            ids = {name: project_id for name, project_id in session.execute(query)}
            for change in changes:
                project_id = ids.get(change.project)
                if project_id is not None:  # a directory that is no project has no runs
                    self._record_project(session, project_id, change.project, change.runs)

    def _record_project(
        self, session: Session, project_id: int, project: str, found: list[RunInfo]
    ) -> None:
        existing: dict[str, Run] = {}
        for start in range(0, len(found), IN_BATCH):
            paths = [info.path for info in found[start : start + IN_BATCH]]
            query = select(Run).where(Run.project_id == project_id, Run.path.in_(paths))
            existing.update((run.path, run) for run in session.scalars(query))
        for info in found:
            last_write = _utc(info.last_write)
            run = existing.get(info.path)
            if run is None:
                if len(info.path) > MAX_PATH:
                    log.warning(
                        "%s/%s: path too long for the registry; skipped", project, info.path
                    )
                    continue
                group, _, name = info.path.rpartition("/")
                run = Run(
                    project_id=project_id,
                    path=info.path,
                    name=name[:MAX_NAME],
                    group=group[:MAX_GROUP] or None,
                    status=RunStatus.discovered,
                    source=RunSource.discovered,
                    hparams={},
                    metrics={},
                    created_by=ACTOR,
                    first_write=last_write,
                )
                session.add(run)
                note_event(session, run, "status", RunStatus.discovered.value, actor=ACTOR)
                log.info("discovered run %s/%s", project, info.path)
            run.bytes, run.files = info.bytes, info.files
            if last_write is not None:
                run.last_write = last_write
                run.first_write = run.first_write or last_write
