"""The run's hparams event file as TensorBoard's own loader reads it: one session start,
final metrics appended as they change, hyperparameter changes written anew, and a file of
that name tbhub did not write left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.plugins.hparams import metadata

from tbhub.storage.event_reader import RunFollower
from tbhub.storage.hparams_file import FILE_NAME, NotOurs, write_hparams_file


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "vision" / "r1").mkdir(parents=True)
    return tmp_path / "vision" / "r1"


def write(run_dir: Path, hparams: dict[str, Any], metrics: dict[str, float]) -> bool:
    when = {"started": 1_700_000_000.0, "now": 1_700_000_100.0}
    return write_hparams_file(run_dir.parents[1], "vision", "r1", hparams=hparams,
                              metrics=metrics, **when)  # fmt: skip


def read(run_dir: Path) -> tuple[dict[str, Any], list[tuple[str, int, float]]]:
    """(the session start's hparams, [(metric tag, step, value)]) as TensorBoard reads them."""
    hparams: dict[str, Any] = {}
    scalars = []
    for event in LegacyEventFileLoader(str(run_dir / FILE_NAME)).Load():
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME:
                content = value.metadata.plugin_data.content
                start = metadata.parse_session_start_info_plugin_data(content)
                for key, hp in start.hparams.items():
                    hparams[key] = getattr(hp, hp.WhichOneof("kind"))
            elif value.HasField("simple_value"):
                scalars.append((value.tag, event.step, round(value.simple_value, 5)))
    return hparams, scalars


def test_the_file_holds_the_session_start_and_the_final_metrics(run_dir: Path) -> None:
    assert write(run_dir, {"lr": 0.1, "optimizer": "adam", "amp": True, "seed": None},
                 {"accuracy": 0.9})  # fmt: skip
    hparams, scalars = read(run_dir)
    assert hparams == {"lr": 0.1, "optimizer": "adam", "amp": True, "seed": "null"}
    assert scalars == [("final/accuracy", 0, 0.9)]


def test_a_changed_metric_is_appended_and_an_unchanged_one_writes_nothing(run_dir: Path) -> None:
    write(run_dir, {"lr": 0.1}, {"accuracy": 0.9})
    inode, size = (run_dir / FILE_NAME).stat().st_ino, (run_dir / FILE_NAME).stat().st_size
    assert not write(run_dir, {"lr": 0.1}, {"accuracy": 0.9})
    assert (run_dir / FILE_NAME).stat().st_size == size
    assert write(run_dir, {"lr": 0.1}, {"accuracy": 0.95, "loss": 0.2})
    assert (run_dir / FILE_NAME).stat().st_ino == inode  # appended: a board reading it goes on
    _, scalars = read(run_dir)
    assert scalars == [("final/accuracy", 0, 0.9), ("final/accuracy", 1, 0.95),
                       ("final/loss", 1, 0.2)]  # fmt: skip


def test_changed_hyperparameters_write_the_file_anew_through_a_rename(run_dir: Path) -> None:
    write(run_dir, {"lr": 0.1}, {"accuracy": 0.9})
    inode = (run_dir / FILE_NAME).stat().st_ino
    assert write(run_dir, {"lr": 0.2}, {"accuracy": 0.9})
    assert (run_dir / FILE_NAME).stat().st_ino != inode
    assert read(run_dir) == ({"lr": 0.2}, [("final/accuracy", 0, 0.9)])
    assert sorted(p.name for p in run_dir.iterdir()) == [FILE_NAME]  # no temporary left


def test_a_run_without_hyperparameters_or_metrics_gets_no_file(run_dir: Path) -> None:
    assert not write(run_dir, {}, {})
    assert list(run_dir.iterdir()) == []


@pytest.mark.parametrize("content", [b"", b"not an event file", bytes(64)])
def test_a_file_of_that_name_tbhub_did_not_write_is_never_touched(
    run_dir: Path, content: bytes
) -> None:
    (run_dir / FILE_NAME).write_bytes(content)
    with pytest.raises(NotOurs, match="did not write"):
        write(run_dir, {"lr": 0.1}, {"accuracy": 0.9})
    assert (run_dir / FILE_NAME).read_bytes() == content


def test_the_health_reader_reads_the_file_as_one_more_clean_curve(run_dir: Path) -> None:
    write(run_dir, {"lr": 0.1}, {"accuracy": 0.9})
    write(run_dir, {"lr": 0.1}, {"accuracy": 0.95})
    follower = RunFollower(run_dir.parents[1], "vision", "r1")
    reading = follower.read(1 << 20)
    assert not reading.behind and not reading.reset
    assert [(p.tag, p.step) for p in reading.scalars] == [("final/accuracy", 0),
                                                            ("final/accuracy", 1)]  # fmt: skip
