"""What the run-health tests share: a project on a migrated database with runs written by real
writers (tests/health/writers.py), the monitor over them, and the healthy corpus."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Incident, Project
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.watcher import ProjectChanges
from tbhub.health.monitor import HealthMonitor
from tbhub.storage.scalars import ScalarCache
from tbhub.storage.scan import EVENT_FILE_PREFIX, scan_under
from tests.api.conftest import team  # noqa: F401  (the roles fixture, for the API tests)
from tests.health.writers import healthy_corpus_fixture

healthy_corpus = healthy_corpus_fixture()
PROJECT = "vision"


@pytest.fixture
def project(settings: Settings, factory: sessionmaker[Session]) -> Path:
    """The project `vision` (no members): its directory."""
    with transaction(factory) as session:
        existing = session.scalar(select(Project).where(Project.name == PROJECT))
        if existing is None:
            create_project(session, name=PROJECT, storage_root=settings.storage, owner=None,
                           actor="test")  # fmt: skip
    return settings.storage / PROJECT


def discover(settings: Settings, factory: sessionmaker[Session], project: str = PROJECT) -> None:
    """Record the project's runs as the watcher's sink does (discovered rows)."""
    found = scan_under(settings.storage / project, project, "")
    DatabaseRunSink(factory).record([ProjectChanges(project, runs=found)])


def event_files(root: Path, project: str = PROJECT) -> set[tuple[str, str]]:
    """Every event file of the project as the watcher reports them: (project, path in it)."""
    base = root / project
    return {
        (project, str(Path(d, name).relative_to(base)))
        for d, _, names in os.walk(base)
        for name in names
        if name.startswith(EVENT_FILE_PREFIX)
    }


@pytest.fixture
def monitor(settings: Settings, factory: sessionmaker[Session]) -> Iterator[HealthMonitor]:
    """A monitor driven pass by pass by the test (no thread)."""
    watching = HealthMonitor(settings, factory, ScalarCache(settings.storage))
    yield watching
    watching.stop()


def drain(monitor: HealthMonitor, passes: int = 100) -> int:
    """Run passes until nothing is left to read (and the runs table was looked at); the
    incidents raised."""
    raised = 0
    for _ in range(passes):
        monitor.check_runs_now()
        raised += monitor.run_pass()
        if not monitor.behind():
            return raised
    raise AssertionError("the monitor never caught up")


def incidents_of(factory: sessionmaker[Session]) -> list[Incident]:
    with factory() as session:
        rows = list(session.scalars(select(Incident).order_by(Incident.id)))
        session.expunge_all()
        return rows
