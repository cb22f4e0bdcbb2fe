"""The monitor as `tbhub serve` runs it: the storage watcher (inotify, and polling) hands the
event files a live writer grows to the monitor's thread, which raises the NaN within seconds
of its record reaching the disk."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Project
from tbhub.core.settings import Settings
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.runs import RunFields, register_run
from tbhub.domain.watcher import StorageWatcher, WatchMode
from tbhub.health.monitor import HealthMonitor
from tbhub.health.rules import set_rule
from tbhub.storage.scalars import ScalarCache
from tests.health.conftest import incidents_of
from tests.health.writers import LiveRun, RunSpec

POLL_INTERVAL = 0.5
# Generous bounds for a shared test machine; bench/ measures the real latency.
LATENCY_LIMIT = {"inotify": 10.0, "polling": 10.0 + POLL_INTERVAL}


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_a_nan_written_live_is_an_incident_within_seconds(
    mode: WatchMode, project: Path, settings: Settings, factory: sessionmaker[Session]
) -> None:
    monitor = HealthMonitor(settings, factory, ScalarCache(settings.storage))
    sink = DatabaseRunSink(factory)
    watcher = StorageWatcher(
        settings.storage,
        sink,
        mode=mode,
        poll_interval=POLL_INTERVAL,
        claims=sink.registered,
        on_event_files=monitor.event_files,
    )
    monitor.start()
    watcher.start()
    spec = RunSpec("live-nan", "torch", "nan", steps=400, bad_step=60, seed=21)
    try:
        assert watcher.wait_ready(30)
        with LiveRun(project / "live-nan", spec, rate=40) as live:
            bad_time = live.wait_bad(120)
            deadline = time.time() + 60
            found = []
            while not found and time.time() < deadline:
                found = [i for i in incidents_of(factory) if i.detector == "nan"]
                time.sleep(0.05)
            seen = time.time()
    finally:
        watcher.stop()
        monitor.stop()
    assert found, "no incident within a minute"
    assert {i.step for i in found} == {60} and {i.run_path for i in found} == {"live-nan"}
    assert seen - bad_time <= LATENCY_LIMIT[mode]


def test_a_run_whose_writer_stops_is_stalled(
    project: Path, settings: Settings, factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
    assert project_id is not None
    with transaction(factory) as session:  # a project that calls a run stalled after 1.2 s
        set_rule(session, project_id=project_id, detector="stalled", change={"threshold": 0.02},
                 actor="test")  # fmt: skip
    run = register_run(factory, storage_root=settings.storage, project="vision",
                       project_id=project_id, name="sleepy", group=None,
                       fields=RunFields(hparams={}, tags=[]), actor="test")  # fmt: skip
    monitor = HealthMonitor(settings, factory, ScalarCache(settings.storage), runs_every=0.5)
    sink = DatabaseRunSink(factory)
    watcher = StorageWatcher(settings.storage, sink, mode="inotify", claims=sink.registered,
                             on_event_files=monitor.event_files)  # fmt: skip
    monitor.start()
    watcher.start()
    spec = RunSpec("sleepy", "torch", "stall", steps=400, bad_step=40, seed=22)
    try:
        with LiveRun(project / run.path, spec, rate=40) as live:
            # Before the writer's first record the quiet run may be stalled already (and that
            # incident resolved by the first write): only the stall after the last one counts.
            stopped = live.wait_bad(120)  # the writer has stopped writing (its process lives on)
            deadline = time.time() + 60
            found = []
            while not found and time.time() < deadline:
                found = [i for i in incidents_of(factory)
                         if i.detector == "stalled" and i.resolved_at is None]  # fmt: skip
                time.sleep(0.2)
    finally:
        watcher.stop()
        monitor.stop()
    assert [(i.run_path, i.resolved_at) for i in found] == [(run.path, None)]
    assert "wrote nothing for" in found[0].message
    assert found[0].first_seen.timestamp() >= stopped
