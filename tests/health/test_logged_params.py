"""Hyperparameters and metrics the training code wrote, read by the run-health monitor through
the one incremental reader, from runs written by the real libraries (torch, tensorboardX, a
tiny HF Trainer run, a tiny Lightning run): kept on the run apart from what was registered,
searchable and sortable, bounded, and never taken from tbhub's own hparams file."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session, sessionmaker
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams.summary_v2 import hparams_pb

from tbhub.core.db import transaction
from tbhub.core.models import Base, Run, RunParam
from tbhub.core.settings import Settings
from tbhub.domain.run_params import parse_filters, parse_sort, search_runs, sync_params
from tbhub.health.monitor import HealthMonitor
from tbhub.storage.hparams_file import write_hparams_file
from tbhub.storage.logged_params import MAX_KEYS, TEXT_MAX
from tbhub.storage.tfrecord import framed
from tests.health.conftest import PROJECT, discover, drain, event_files
from tests.health.hparams_writers import WRITERS, write_run


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run per writer, written once for the module."""
    root = tmp_path_factory.mktemp("hparams-writers")
    for kind in WRITERS:
        write_run(kind, root / kind)
    return {kind: root / kind for kind in WRITERS}


def copy_run(source: Path, target: Path) -> None:
    for path in source.rglob("*"):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())


def read_all(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor
) -> dict[str, Run]:
    discover(settings, factory)
    monitor.event_files(event_files(settings.storage))
    drain(monitor)
    with factory() as session:
        runs = {run.path: run for run in session.scalars(select(Run))}
        session.expunge_all()
    return runs


def search(factory: sessionmaker[Session], *filters: str, sort: str = "created") -> list[str]:
    with factory() as session:
        found = search_runs(session, project_ids=None, filters=parse_filters(filters),
                            sort=parse_sort(sort), offset=0, limit=50)  # fmt: skip
        return [run.path for run, _ in found.rows]


def test_each_writers_hparams_and_metrics_reach_the_run_and_the_search(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor,
    written: dict[str, Path],
) -> None:  # fmt: skip
    for kind, source in written.items():
        copy_run(source, project / kind)
    runs = read_all(project, settings, factory, monitor)

    torch_run = runs["torch"]
    assert torch_run.logged_hparams == {"lr": 0.1, "batch_size": 32.0, "optimizer": "adam"}
    assert torch_run.logged_metrics == {"hparam/accuracy": 0.9, "hparam/loss": 0.25}
    assert torch_run.hparams == {} and torch_run.metrics == {}  # nothing registered
    x_run = runs["tensorboardX"]
    assert x_run.logged_hparams == {"lr": 0.01, "optimizer": "sgd", "nesterov": True}
    assert x_run.logged_metrics == {"hparam/accuracy": 0.75}
    hf_run = runs["hf_trainer"]  # the Trainer's arguments, as its `args` text holds them
    assert hf_run.logged_hparams is not None
    assert hf_run.logged_hparams["learning_rate"] == 0.003
    assert hf_run.logged_hparams["seed"] == 7.0
    assert hf_run.logged_hparams["per_device_train_batch_size"] == 4.0
    assert hf_run.logged_metrics == {}
    lit_run = runs["lightning"]  # save_hyperparameters, and hp_metric as last logged
    assert lit_run.logged_hparams == {"lr": 0.05, "hidden": 16.0, "activation": "relu"}
    assert lit_run.logged_metrics == {"hp_metric": 0.5}

    assert search(factory, "hparam.optimizer=adam") == ["torch"]
    assert sorted(search(factory, "hparam.lr<0.06")) == ["lightning", "tensorboardX"]
    assert search(factory, "hparam.learning_rate=0.003") == ["hf_trainer"]
    assert search(factory, "metric.hp_metric=0.5") == ["lightning"]
    assert search(factory, "metric.hparam/accuracy>0", sort="-metric.hparam/accuracy") == [
        "torch", "tensorboardX"]  # fmt: skip
    with factory() as session:
        sources = set(session.scalars(select(RunParam.source)))
    assert sources == {"t"}


def test_a_registered_value_wins_over_the_one_the_code_wrote(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor,
    written: dict[str, Path],
) -> None:  # fmt: skip
    copy_run(written["torch"], project / "torch")
    runs = read_all(project, settings, factory, monitor)
    with transaction(factory) as session:
        run = session.get(Run, runs["torch"].id)
        assert run is not None
        run.hparams = {"lr": 0.2, "note": "registered"}
        sync_params(session, run)
    assert search(factory, "hparam.lr=0.2") == ["torch"]
    assert search(factory, "hparam.lr=0.1") == []
    assert search(factory, "hparam.optimizer=adam") == ["torch"]  # the code's, not registered
    with factory() as session:
        rows = {(p.key, p.source) for p in session.scalars(
            select(RunParam).where(RunParam.kind == "h"))}  # fmt: skip
    assert rows == {("lr", "r"), ("note", "r"), ("batch_size", "t"), ("optimizer", "t")}


def test_tbhubs_own_hparams_file_is_not_taken_for_the_codes(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor
) -> None:
    (project / "registered").mkdir(parents=True)
    write_hparams_file(settings.storage, PROJECT, "registered", hparams={"lr": 0.3},
                       metrics={"acc": 0.5}, started=1.0, now=2.0)  # fmt: skip
    runs = read_all(project, settings, factory, monitor)
    assert runs["registered"].logged_hparams is None
    assert runs["registered"].logged_metrics is None


def write_session_start(run_dir: Path, values: dict[str, object]) -> None:
    """An event file holding one session start (TensorBoard's own builder), as add_hparams
    writes it."""
    run_dir.mkdir(parents=True)
    start = Event(wall_time=1.0, step=0, summary=hparams_pb(values, trial_id="t"))
    (run_dir / "events.out.tfevents.1.host").write_bytes(framed(start.SerializeToString()))


def test_the_codes_values_are_bounded_per_run(
    project: Path, settings: Settings, factory: sessionmaker[Session], monitor: HealthMonitor
) -> None:
    write_session_start(project / "wide", {f"key{i:04d}": i for i in range(MAX_KEYS + 50)})
    write_session_start(project / "long", {"long": "x" * 1000, "k" * 500: 1.0, "ok": 2})
    runs = read_all(project, settings, factory, monitor)
    wide = runs["wide"].logged_hparams
    assert wide is not None and len(wide) == MAX_KEYS
    assert runs["long"].logged_hparams == {"long": "x" * TEXT_MAX, "ok": 2.0}


def test_the_migration_makes_the_columns_the_models_describe(
    factory: sessionmaker[Session],
) -> None:
    with factory() as session:
        found = inspect(session.connection())
        runs = {c["name"]: c for c in found.get_columns("runs")}
        params = {c["name"]: c for c in found.get_columns("run_params")}
        context = MigrationContext.configure(session.connection(), opts={"compare_type": True})
        diff = repr(compare_metadata(context, Base.metadata))
    assert runs["logged_hparams"]["nullable"] and runs["logged_metrics"]["nullable"]
    assert not params["source"]["nullable"] and "r" in str(params["source"]["default"])
    for column in ("logged_hparams", "logged_metrics", "'source'"):
        assert column not in diff  # the models describe what the migration made
