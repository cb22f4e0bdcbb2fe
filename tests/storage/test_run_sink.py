"""The watcher's sink on both databases: new directories become discovered runs, and every
run's size and last write follow the disk, registered runs keeping what the job said."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Run, RunSource, RunStatus
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project, get_project
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.runs import RunFields, register_run
from tbhub.domain.watcher import ProjectChanges
from tbhub.storage.scan import RunInfo

T0 = 1_700_000_000.0


def runs(factory: sessionmaker[Session]) -> dict[str, Run]:
    with factory() as session:
        return {run.path: run for run in session.scalars(select(Run))}


def test_discovered_runs_are_created_then_kept_current(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    with transaction(factory) as session:
        create_project(session, name="vision", storage_root=settings.storage, owner=None,
                       actor="test")  # fmt: skip
    sink = DatabaseRunSink(factory)
    sink.record([ProjectChanges("vision", runs=[RunInfo("vision", "exp/a/run-1", 10, 1, T0)])])
    run = runs(factory)["exp/a/run-1"]
    assert (run.name, run.group, run.status, run.source, run.created_by) == (
        "run-1",
        "exp/a",
        RunStatus.discovered,
        RunSource.discovered,
        "watcher",
    )
    assert (run.bytes, run.files) == (10, 1)
    assert run.first_write == run.last_write == datetime.fromtimestamp(T0, UTC)

    sink.record([ProjectChanges("vision", runs=[RunInfo("vision", "exp/a/run-1", 99, 2, T0 + 5)])])
    run = runs(factory)["exp/a/run-1"]
    assert (run.bytes, run.files) == (99, 2)
    assert run.first_write == datetime.fromtimestamp(T0, UTC)
    assert run.last_write == datetime.fromtimestamp(T0 + 5, UTC)
    assert len(runs(factory)) == 1


def test_a_registered_run_gets_its_size_and_keeps_its_status(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    with transaction(factory) as session:
        create_project(session, name="vision", storage_root=settings.storage, owner=None,
                       actor="test")  # fmt: skip
        project_id = get_project(session, name="vision").id
    registered = register_run(
        factory, storage_root=settings.storage, project="vision", project_id=project_id,
        name="job", group=None, fields=RunFields(hparams={}, tags=[]), actor="alice",
    )  # fmt: skip
    DatabaseRunSink(factory).record(
        [ProjectChanges("vision", runs=[RunInfo("vision", registered.path, 5, 1, T0)])]
    )
    run = runs(factory)[registered.path]
    assert (run.status, run.source, run.bytes) == (RunStatus.running, RunSource.api, 5)
    assert len(runs(factory)) == 1


def test_a_directory_that_is_no_project_records_nothing(
    factory: sessionmaker[Session],
) -> None:
    DatabaseRunSink(factory).record(
        [ProjectChanges("ghost", runs=[RunInfo("ghost", "r", 1, 1, T0)])]
    )
    assert runs(factory) == {}
