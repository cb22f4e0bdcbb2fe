"""No false positives: the monitor with its default rules over 30+ healthy runs from several
real writers (torch, tensorboardX, TensorBoard's own, the HF Trainer, Lightning) raises no
incident at all."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.health.monitor import HealthMonitor
from tests.health.conftest import discover, drain, event_files, incidents_of
from tests.health.test_monitor import link_run
from tests.health.writers import Written


def test_thirty_healthy_real_runs_raise_no_incident(
    healthy_corpus: list[Written], project: Path, settings: Settings,
    factory: sessionmaker[Session], monitor: HealthMonitor,
) -> None:  # fmt: skip
    writers = Counter(w.writer for w in healthy_corpus)
    assert len(healthy_corpus) >= 30 and len(writers) >= 4, writers
    for written in healthy_corpus:
        link_run(written, project / written.name)
    discover(settings, factory)
    monitor.event_files(event_files(settings.storage))
    drain(monitor)
    assert monitor.stats.bytes_read > 0 and monitor.followed() == len(healthy_corpus)
    assert [(i.run_path, i.message) for i in incidents_of(factory)] == []
