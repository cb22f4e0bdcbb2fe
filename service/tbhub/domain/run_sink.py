"""The watcher's sink: what it saw on the storage, written into the runs table.

A directory that got event files and has no row becomes a `discovered` run; every present
run, registered through the API or discovered, gets its bytes, files and last write. Runs
that left the disk keep their rows: retention marks the ones it moved (runs.mark_retention).

A run owns everything under its directory (jobs/scan.py): the watcher walks with the
project's registered runs (`registered`) as runs whatever they hold, so event files in a
registered run's `train/` or `version_0/` count towards it and become no run of their own.
A discovered row found inside a run recorded now (made before its parent was a run, or by
an older tbhub) is merged into it: removed, with a line in the log.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Project, Run, RunSource, RunStatus
from tbhub.domain.runs import note_event, registered_paths
from tbhub.domain.watcher import ProjectChanges, owner_at_or_above
from tbhub.storage.scan import RunInfo

log = logging.getLogger("tbhub.watcher")

ACTOR = "watcher"
MAX_PATH = Run.__table__.c.path.type.length  # type: ignore[attr-defined]
MAX_NAME = Run.__table__.c.name.type.length  # type: ignore[attr-defined]
MAX_GROUP = Run.__table__.c.group_name.type.length  # type: ignore[attr-defined]
IN_BATCH = 500  # paths per IN (...) query

# The measured columns of present rows, by primary key, as one executemany: the ORM's bulk
# UPDATE built each row's parameters through its own machinery, a third of the watcher's
# time with 1,000 runs writing.
_RUNS = cast(Table, Run.__table__)
_MEASURE = update(_RUNS).where(_RUNS.c.id == bindparam("run_id"))
MEASURED = _MEASURE.values(bytes=bindparam("run_bytes"), files=bindparam("run_files"))
MEASURED_WRITES = MEASURED.values(
    last_write=bindparam("run_last"), first_write=bindparam("run_first")
)


def _utc(ts: float) -> datetime | None:
    return datetime.fromtimestamp(ts, UTC) if ts > 0 else None


class DatabaseRunSink:
    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        # (project, run path) already looked under for discovered rows to merge: a run
        # recorded again (every flush while it writes) has none new under it, since the
        # watcher measures it whole. Forgotten when the run leaves the disk.
        self._merged: set[tuple[str, str]] = set()

    def registered(self, project: str) -> frozenset[str]:
        """The watcher's `claims`: the project's registered runs still in place."""
        with self.factory() as session:
            return registered_paths(session, project=project)

    def record(self, changes: list[ProjectChanges]) -> None:
        """All changes in one transaction: a failure leaves nothing half-recorded."""
        for change in changes:
            self._merged.difference_update((change.project, path) for path in change.gone)
        changes = [c for c in changes if c.runs]
        if not changes:
            return
        with transaction(self.factory) as session:
            names = [c.project for c in changes]
            query = select(Project.name, Project.id).where(Project.name.in_(names))
            ids = {name: project_id for name, project_id in session.execute(query)}
            merged: set[tuple[str, str]] = set()
            for change in changes:
                project_id = ids.get(change.project)
                if project_id is not None:  # a directory that is no project has no runs
                    merged |= self._record_project(session, project_id, change.project,
                                                   change.runs)  # fmt: skip
        self._merged |= merged  # only once committed

    def _record_project(
        self, session: Session, project_id: int, project: str, found: list[RunInfo]
    ) -> set[tuple[str, str]]:
        """Record one project's runs; the (project, path)s looked under for rows to merge."""
        # The rows as (id, first write) only: a busy storage re-measures every writing run
        # each flush, and loading whole rows (their tags too) cost the watcher most of a core
        # at 1,000 runs; the measured columns go in as one UPDATE by primary key.
        existing: dict[str, tuple[int, datetime | None]] = {}
        for start in range(0, len(found), IN_BATCH):
            paths = [info.path for info in found[start : start + IN_BATCH]]
            query = select(Run.path, Run.id, Run.first_write).where(
                Run.project_id == project_id, Run.path.in_(paths)
            )
            existing.update(
                (path, (run_id, first)) for path, run_id, first in session.execute(query)
            )
        measured: list[dict[str, object]] = []
        measured_writes: list[dict[str, object]] = []
        for info in found:
            last_write = _utc(info.last_write)
            row = existing.get(info.path)
            if row is not None:
                values: dict[str, object] = {
                    "run_id": row[0], "run_bytes": info.bytes, "run_files": info.files
                }  # fmt: skip
                if last_write is None:
                    measured.append(values)
                else:
                    values["run_last"] = last_write
                    values["run_first"] = row[1] or last_write
                    measured_writes.append(values)
                continue
            if len(info.path) > MAX_PATH:
                log.warning("%s/%s: path too long for the registry; skipped", project, info.path)
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
                last_write=last_write,
                bytes=info.bytes,
                files=info.files,
            )
            session.add(run)
            note_event(session, run, "status", RunStatus.discovered.value, actor=ACTOR)
            log.info("discovered run %s/%s", project, info.path)
        for statement, rows in ((MEASURED, measured), (MEASURED_WRITES, measured_writes)):
            if rows:
                session.execute(statement, rows)
        owners = {info.path for info in found}
        if any((project, path) not in self._merged for path in owners):
            self._merge_nested(session, project_id, project, owners)
            return {(project, path) for path in owners}
        return set()

    def _merge_nested(
        self, session: Session, project_id: int, project: str, owners: set[str]
    ) -> None:
        """Remove the discovered rows that lie inside a run recorded now."""
        query = select(Run.id, Run.path).where(
            Run.project_id == project_id,
            Run.source == RunSource.discovered,
            Run.path.contains("/"),
        )
        for run_id, path in session.execute(query).all():
            outer = owner_at_or_above(owners, path.rpartition("/")[0])
            if outer is not None:
                log.info("merged discovered run %s/%s into run %s", project, path, outer)
                session.delete(session.get_one(Run, run_id))
