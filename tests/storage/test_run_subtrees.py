"""A run owns everything under its directory. A registered run whose event files sit in
subdirectories (`train/` and `val/`, `lightning_logs/version_0`, an uploaded tree) gets all
their bytes and files and spawns no discovered run; an unregistered tree is one run at its
outermost directory holding event files. Real event files from TensorBoard's writer, the
real watcher (inotify) and the runs table on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Run, RunSource
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project, get_project
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.runs import RunFields, register_run
from tbhub.domain.watcher import ProjectChanges, StorageWatcher
from tbhub.housekeeping import retention
from tbhub.storage.sample_logs import write_run
from tbhub.storage.scan import RunInfo
from tests.e2e.harness import wait_until

SUBTREES = [("train", "val"), ("lightning_logs/version_0",), ("uploaded/a/b", "uploaded/c")]


def files_under(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def rows(factory: sessionmaker[Session]) -> dict[str, tuple[RunSource, int, int]]:
    with factory() as session:
        return {r.path: (r.source, r.bytes, r.files) for r in session.scalars(select(Run))}


@pytest.fixture
def project_id(factory: sessionmaker[Session], settings: Settings) -> int:
    with transaction(factory) as session:
        create_project(session, name="vision", storage_root=settings.storage, owner=None,
                       actor="t")  # fmt: skip
        return get_project(session, name="vision").id


def register(factory: sessionmaker[Session], settings: Settings, project_id: int, name: str) -> str:
    run = register_run(factory, storage_root=settings.storage, project="vision",
                       project_id=project_id, name=name, group="g",
                       fields=RunFields(hparams={}, tags=[]), actor="t")  # fmt: skip
    return run.path


@pytest.fixture
def watch(factory: sessionmaker[Session], settings: Settings) -> Iterator[StorageWatcher]:
    sink = DatabaseRunSink(factory)
    watcher = StorageWatcher(settings.storage, sink, mode="inotify", claims=sink.registered,
                             min_gap=0.05)  # fmt: skip
    try:
        yield watcher
    finally:
        watcher.stop()


def test_a_registered_run_owns_its_subdirectories_as_the_job_writes_them(
    factory: sessionmaker[Session], settings: Settings, project_id: int, watch: StorageWatcher
) -> None:
    paths = [register(factory, settings, project_id, f"job{i}") for i in range(len(SUBTREES))]
    watch.start()
    assert watch.wait_ready(15)
    for i, (path, subdirs) in enumerate(zip(paths, SUBTREES, strict=True)):
        for sub in subdirs:
            write_run(settings.storage / "vision" / path / sub, run_index=i, steps=20, tags=2)
    expected = {p: (RunSource.api, *files_under(settings.storage / "vision" / p)) for p in paths}
    wait_until(
        lambda: rows(factory) == expected, timeout=15, what=f"{expected}, not {rows(factory)}"
    )


def test_the_first_scan_counts_subtrees_and_merges_rows_an_older_scan_split_off(
    factory: sessionmaker[Session], settings: Settings, project_id: int, watch: StorageWatcher
) -> None:
    path = register(factory, settings, project_id, "job")
    for sub in SUBTREES[0]:
        write_run(settings.storage / "vision" / path / sub, steps=20, tags=2)
    # What tbhub recorded before: each subdirectory a discovered run of its own.
    DatabaseRunSink(factory).record(
        [
            ProjectChanges(
                "vision", runs=[RunInfo("vision", f"{path}/{s}", 1, 1, 1.0) for s in SUBTREES[0]]
            )
        ]
    )
    watch.start()
    assert watch.wait_ready(15)
    bytes_, files = files_under(settings.storage / "vision" / path)
    assert rows(factory) == {path: (RunSource.api, bytes_, files)}


def test_an_unregistered_tree_is_one_run_at_its_outermost_event_directory(
    factory: sessionmaker[Session], settings: Settings, project_id: int, watch: StorageWatcher
) -> None:
    watch.start()
    assert watch.wait_ready(15)
    exp = settings.storage / "vision" / "exp"
    write_run(exp / "eval", steps=10, tags=1)  # the nested one first
    wait_until(lambda: "exp/eval" in rows(factory), timeout=15, what="exp/eval discovered")
    write_run(exp, steps=10, tags=1)
    write_run(settings.storage / "vision" / "sweep" / "a" / "train", steps=10, tags=1)
    write_run(settings.storage / "vision" / "sweep" / "b" / "train", steps=10, tags=1)
    expected = {
        "exp": (RunSource.discovered, *files_under(exp)),
        **{
            f"sweep/{k}/train": (RunSource.discovered,
                                 *files_under(settings.storage / "vision" / "sweep" / k))
            for k in "ab"
        },
    }  # fmt: skip
    wait_until(
        lambda: rows(factory) == expected, timeout=15, what=f"{expected}, not {rows(factory)}"
    )


def test_retention_moves_a_registered_run_as_one_with_its_subdirectories(
    factory: sessionmaker[Session], settings: Settings, project_id: int
) -> None:
    path = register(factory, settings, project_id, "job")
    for sub in SUBTREES[1]:
        write_run(settings.storage / "vision" / path / sub, steps=10, tags=1)
    settings.retention_max_project_bytes = 1
    settings.retention_active_minutes = 0
    [plan] = retention.plan_retention(factory, settings, project="vision")
    assert [d.run.path for d in plan.remove] == [path] and plan.kept_runs == 0
    assert plan.remove_bytes == files_under(settings.storage / "vision" / path)[0]
