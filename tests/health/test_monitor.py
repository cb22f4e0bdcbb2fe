"""The monitor over runs written by real writers: each fault is found once, at its step, and a
healthy run raises nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tbhub.core.settings import Settings
from tbhub.health.monitor import HealthMonitor
from tbhub.storage.scalars import ScalarCache
from tbhub.storage.tfrecord import framed
from tests.health.conftest import discover, drain, event_files, incidents_of
from tests.health.writers import RunSpec, Written, write_runs

FAULTS = {
    "torch-nan": RunSpec("torch-nan", "torch", "nan", steps=300, bad_step=150, seed=1),
    "x-inf": RunSpec("x-inf", "tensorboardX", "nan", steps=200, bad_step=120, seed=2,
                     bad_value="inf"),
    "tb-nan": RunSpec("tb-nan", "tensorboard", "nan", steps=200, bad_step=90, seed=3),
    "torch-div": RunSpec("torch-div", "torch", "divergence", steps=300, seed=4),
    "x-div": RunSpec("x-div", "tensorboardX", "divergence", steps=300, seed=5),
    "torch-grad": RunSpec("torch-grad", "torch", "grad_explosion", steps=300, seed=6),
    "tb-grad": RunSpec("tb-grad", "tensorboard", "grad_explosion", steps=300, seed=7),
    "healthy": RunSpec("healthy", "torch", "healthy", steps=300, seed=8),
}  # fmt: skip


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Written]:
    """The faulty runs, written once for the module (each test links them into its storage)."""
    root = tmp_path_factory.mktemp("faults")
    written = write_runs({root / name: spec for name, spec in FAULTS.items()})
    return {w.name: w for w in written.values()}


def link_run(written: Written, target: Path) -> None:
    """A copy of a written run under the project (hard links: the same bytes, no copying)."""
    for source in written.run_dir.rglob("*"):
        dest = target / source.relative_to(written.run_dir)
        if source.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.hardlink_to(source)


@pytest.fixture
def watched(
    project: Path, faults: dict[str, Written], settings: Settings,
    factory: sessionmaker[Session], monitor: HealthMonitor,
) -> HealthMonitor:  # fmt: skip
    for written in faults.values():
        link_run(written, project / written.name)
    discover(settings, factory)
    monitor.event_files(event_files(settings.storage))
    return monitor


def test_each_fault_is_one_incident_at_its_step_and_the_healthy_run_has_none(
    watched: HealthMonitor, faults: dict[str, Written], factory: sessionmaker[Session]
) -> None:
    drain(watched)
    found = incidents_of(factory)
    by_run: dict[str, set[str]] = {}
    for incident in found:
        by_run.setdefault(incident.run_path, set()).add(incident.detector)
    assert "healthy" not in by_run
    assert by_run["torch-nan"] >= {"nan"} and by_run["tb-nan"] >= {"nan"}
    assert by_run["x-inf"] >= {"nan"}
    assert "divergence" in by_run["torch-div"] and "divergence" in by_run["x-div"]
    assert "grad_explosion" in by_run["torch-grad"] and "grad_explosion" in by_run["tb-grad"]
    for incident in found:
        written = faults[incident.run_path]
        assert incident.step is not None and written.bad_step is not None
        assert written.bad_step <= incident.step <= written.bad_step + 30, incident.message
        assert incident.resolved_at is None and incident.severity in ("error", "warning")
    [nan] = [
        i for i in found if i.run_path == "torch-nan" and i.tag == written_tag(faults, "torch-nan")
    ]
    assert (
        nan.step == faults["torch-nan"].bad_step and nan.value is None and nan.value_text == "nan"
    )
    assert nan.count > 1  # every later NaN of the curve is a repeat, counted on this one
    [inf] = [i for i in found if i.run_path == "x-inf" and i.tag == written_tag(faults, "x-inf")]
    assert inf.value_text == "inf" and inf.step == faults["x-inf"].bad_step


def written_tag(faults: dict[str, Written], name: str) -> str:
    return faults[name].tags["loss"]


def test_a_second_monitor_reading_it_all_again_records_nothing_new(
    watched: HealthMonitor, settings: Settings, factory: sessionmaker[Session]
) -> None:
    drain(watched)
    before = [(i.id, i.count) for i in incidents_of(factory)]
    again = HealthMonitor(settings, factory, ScalarCache(settings.storage))
    again.event_files(event_files(settings.storage))
    assert drain(again) == 0
    assert [(i.id, i.count) for i in incidents_of(factory)] == before
    again.stop()


def test_the_default_rules_are_quiet_on_a_finite_loss_that_only_falls() -> None:
    from tbhub.health.detectors import RunDetectors
    from tbhub.health.rules import RuleSet, defaults
    from tbhub.storage.event_reader import ScalarPoint

    detectors = RunDetectors(RuleSet(defaults(30.0)))
    points = [ScalarPoint("train/loss", s, 0.0, 2.0 * math.exp(-s / 50)) for s in range(500)]
    assert detectors.feed(points) == []


def test_a_pass_reads_every_changed_run_of_many_once(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor
) -> None:
    runs = 600  # more than one IN (...) query's worth of paths
    for i in range(runs):
        run = project / "sweep" / f"run-{i}"
        run.mkdir(parents=True)
        event = Event(step=1, summary=Summary(value=[Summary.Value(tag="loss", simple_value=i)]))
        (run / "events.out.tfevents.1.host").write_bytes(framed(event.SerializeToString()))
    discover(settings, factory)
    monitor.event_files(event_files(settings.storage))
    monitor.run_pass()
    assert monitor.followed() == runs and monitor.behind() == 0
    assert monitor.stats.bytes_read == sum(
        f.stat().st_size for f in project.rglob("events.out.tfevents.*")
    )
