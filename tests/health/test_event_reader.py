"""The one incremental reader (storage/event_reader.py) on files real writers made: NaN kept,
TF1 and TF2 scalars, a torn tail retried, a rewritten or truncated file read again from the
start, a bad frame retried then skipped, a record longer than the budget, histograms when
asked, and the same scalars as TensorBoard's own loader."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tbhub.storage.event_reader import (
    RELIST_SECONDS,
    RETRY_SECONDS,
    SKIP_AFTER_SECONDS,
    RunFollower,
    ScalarPoint,
    read_scalars,
)
from tbhub.storage.tfrecord import framed
from tests.health.writers import RunSpec, Written, write_runs

PROJECT = "vision"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Written]:
    """A torch run with a NaN at step 40, a tensorboardX one and a TF2-style (tensor) one."""
    root = tmp_path_factory.mktemp("writers")
    specs = {
        "torch-nan": RunSpec("torch-nan", "torch", "nan", steps=60, bad_step=40, seed=11),
        "x-healthy": RunSpec("x-healthy", "tensorboardX", steps=60, seed=12),
        "tb-healthy": RunSpec("tb-healthy", "tensorboard", steps=60, seed=13),
    }
    written = write_runs({root / name: spec for name, spec in specs.items()})
    return {w.name: w for w in written.values()}


def place(written: Written, storage: Path, name: str | None = None) -> Path:
    run = storage / PROJECT / (name or written.name)
    shutil.copytree(written.run_dir, run)
    return run


def only_file(run: Path) -> Path:
    [path] = [p for p in run.rglob("events.out.tfevents.*")]
    return path


def keyed(points: list[ScalarPoint]) -> list[tuple[str, int, str]]:
    """Points compared by text (NaN is not equal to itself)."""
    return [(p.tag, p.step, repr(p.value)) for p in points]


def scalar_event(step: int, value: float, tag: str = "loss") -> Event:
    return Event(step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))


def histogram_event(step: int, histo: HistogramProto, tag: str = "w") -> Event:
    return Event(step=step, summary=Summary(value=[Summary.Value(tag=tag, histo=histo)]))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_real_writers_scalars_nan_included(real_runs: dict[str, Written], tmp_path: Path) -> None:
    for name, written in real_runs.items():
        place(written, tmp_path)
        points = RunFollower(tmp_path, PROJECT, name).read(1 << 30).scalars
        loss = [p for p in points if p.tag == written.tags["loss"]]
        assert loss and loss[0].step == 0 and loss[-1].step == written.last_step, name
        bad = [p.step for p in loss if not math.isfinite(p.value)]
        assert bad[:1] == ([written.bad_step] if written.bad_step is not None else []), name


def test_the_follower_reads_what_tensorboards_loader_reads(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    for written in real_runs.values():
        path = only_file(written.run_dir)
        ours = [(p.tag, p.step) for p in read_scalars(path)]
        theirs = []
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.WhichOneof("value") == "simple_value" or (
                    value.metadata.plugin_data.plugin_name == "scalars"
                    or (value.HasField("tensor") and not value.tensor.string_val)
                ):
                    theirs.append((value.tag, int(event.step)))
        assert ours == [t for t in theirs if t[0] in {p[0] for p in ours}] and ours


def test_a_torn_tail_waits_and_is_read_once_whole(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    whole = only_file(real_runs["x-healthy"].run_dir).read_bytes()
    run = tmp_path / PROJECT / "torn"
    run.mkdir(parents=True)
    target = run / "events.out.tfevents.1.host"
    cut = len(whole) - 5  # inside the last record
    target.write_bytes(whole[:cut])
    follower = RunFollower(tmp_path, PROJECT, "torn")
    first = follower.read(1 << 30)
    assert not first.behind and not first.reset
    with open(target, "ab") as fh:
        fh.write(whole[cut:])
    second = follower.read(1 << 30)
    everything = RunFollower(tmp_path, PROJECT, "torn").read(1 << 30).scalars
    assert first.scalars + second.scalars == everything and second.scalars


def test_a_rewritten_or_truncated_file_is_read_again_from_the_start(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    run = place(real_runs["torch-nan"], tmp_path, "again")
    follower = RunFollower(tmp_path, PROJECT, "again")
    before = follower.read(1 << 30).scalars
    path = only_file(run)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated in place
    shorter = follower.read(1 << 30)
    assert shorter.reset and 0 < len(shorter.scalars) < len(before)
    replacement = run / "new"
    replacement.write_bytes(data)
    os.replace(replacement, path)  # replaced by another file of the same name (new inode)
    replaced = follower.read(1 << 30)
    assert replaced.reset and keyed(replaced.scalars) == keyed(before)
    assert follower.read(1 << 30).scalars == []  # and never read twice after that


@pytest.mark.parametrize("before", [1, 150])  # a bad frame first, or after many good ones
def test_a_bad_frame_is_retried_and_skipped_once_it_stays_bad(tmp_path: Path, before: int) -> None:
    run = tmp_path / PROJECT / "bad"
    run.mkdir(parents=True)
    good = b"".join(framed(scalar_event(s, 1.0).SerializeToString()) for s in range(before))
    broken = bytearray(framed(scalar_event(500, 5.0).SerializeToString()))
    broken[-5] ^= 0xFF  # the data no longer matches its CRC
    later = b"".join(framed(scalar_event(s, 2.0).SerializeToString()) for s in range(501, 560))
    (run / "events.out.tfevents.1.host").write_bytes(good + bytes(broken) + later)
    clock = Clock()
    follower = RunFollower(tmp_path, PROJECT, "bad", clock=clock)
    assert [p.step for p in follower.read(1 << 20).scalars] == list(range(before))
    clock.now += RETRY_SECONDS / 2
    assert follower.read(1 << 20).scalars == []  # unchanged and not due: not even read
    clock.now += RETRY_SECONDS
    assert follower.read(1 << 20).scalars == []  # read again: still bad, not skipped yet
    clock.now += SKIP_AFTER_SECONDS
    assert [p.step for p in follower.read(1 << 20).scalars] == list(range(501, 560))


@pytest.mark.parametrize("before", [1, 150])
def test_a_broken_length_stops_the_file_until_it_is_whole(tmp_path: Path, before: int) -> None:
    run = tmp_path / PROJECT / "header"
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1.host"
    good = b"".join(framed(scalar_event(s, 1.0).SerializeToString()) for s in range(before))
    later = framed(scalar_event(before, 2.0).SerializeToString())
    path.write_bytes(good + b"\0" * len(later))  # NFS: the length shown before the data
    follower = RunFollower(tmp_path, PROJECT, "header")
    assert len(follower.read(1 << 20).scalars) == before
    with open(path, "r+b") as fh:  # the data arrives in place
        fh.seek(len(good))
        fh.write(later)
    assert [p.step for p in follower.read(1 << 20).scalars] == [before]


def test_a_record_longer_than_the_budget_is_still_read(tmp_path: Path) -> None:
    run = tmp_path / PROJECT / "big"
    writer = EventFileWriter(str(run))
    histo = HistogramProto(min=0, max=1, num=3, sum=1, sum_squares=1,
                           bucket_limit=[float(i) for i in range(20_000)],
                           bucket=[1.0] * 20_000)  # fmt: skip
    writer.add_event(histogram_event(1, histo))
    writer.add_event(scalar_event(2, 0.5))
    writer.close()
    follower = RunFollower(tmp_path, PROJECT, "big")
    steps = []
    for _ in range(10):
        steps += [p.step for p in follower.read(4096).scalars]
    assert steps == [2]


def test_histograms_only_when_asked_and_their_non_finite_numbers_found(tmp_path: Path) -> None:
    run = tmp_path / PROJECT / "histos"
    writer = EventFileWriter(str(run))
    for step, top in ((1, 2.0), (2, math.nan)):
        histo = HistogramProto(min=0, max=top, num=2, sum=2, sum_squares=4,
                               bucket_limit=[1.0, 3.0], bucket=[1.0, 1.0])  # fmt: skip
        writer.add_event(histogram_event(step, histo))
    writer.close()
    assert RunFollower(tmp_path, PROJECT, "histos").read(1 << 20).histograms == []
    asked = RunFollower(tmp_path, PROJECT, "histos", histograms=True).read(1 << 20).histograms
    assert [(h.tag, h.step, h.finite) for h in asked] == [("w", 1, True), ("w", 2, False)]


def test_a_run_that_is_a_symlink_reads_as_nothing(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    (tmp_path / PROJECT).mkdir()
    (tmp_path / PROJECT / "escape").symlink_to(real_runs["x-healthy"].run_dir)
    reading = RunFollower(tmp_path, PROJECT, "escape").read(1 << 20)
    assert reading.scalars == [] and reading.bytes_read == 0


def healthy_run(real_runs: dict[str, Written], storage: Path, name: str) -> tuple[bytes, Path]:
    """A run directory `name` holding a copy of a healthy run's event file."""
    whole = only_file(real_runs["x-healthy"].run_dir).read_bytes()
    run = storage / PROJECT / name
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(whole)
    return whole, run


def _age(directory: Path, seconds: float) -> int:
    """Set the directory's mtime `seconds` into the past; the new mtime in ns."""
    old = os.stat(directory).st_mtime_ns - int(seconds * 1e9)
    os.utime(directory, ns=(old, old))
    return old


def test_a_run_directory_is_listed_again_when_a_file_or_subdirectory_appears(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    whole, run = healthy_run(real_runs, tmp_path, "grows")
    _age(run, 60)  # listed long after its mtime: the listing is trusted
    follower = RunFollower(tmp_path, PROJECT, "grows")
    first = follower.read(1 << 30)
    assert first.scalars and follower.listings[""].trusted
    (run / "events.out.tfevents.2.host").write_bytes(whole)  # a second writer: mtime moves
    second = follower.read(1 << 30)
    assert keyed(second.scalars) == keyed(first.scalars)
    _age(run, 60)
    (run / "train").mkdir()  # Keras-style: the new curves are in a subdirectory
    _age(run, 60)
    follower.read(1 << 30)
    (run / "train" / "events.out.tfevents.3.host").write_bytes(whole)
    third = follower.read(1 << 30)
    assert {p.tag for p in third.scalars} == {"train/" + p.tag for p in first.scalars}


def test_a_listing_is_not_trusted_near_its_mtime_and_is_renewed_after_relist_seconds(
    real_runs: dict[str, Written], tmp_path: Path
) -> None:
    """A filesystem with coarse times can add a file and leave the directory's mtime as it
    was: a listing made within two seconds of the mtime is made again each read, and a
    trusted one at the latest after RELIST_SECONDS."""
    whole, run = healthy_run(real_runs, tmp_path, "coarse")
    now = [1000.0]
    follower = RunFollower(tmp_path, PROJECT, "coarse", clock=lambda: now[0])
    assert follower.read(1 << 30).scalars
    assert not follower.listings[""].trusted  # the mtime is from just now
    mtime = os.stat(run).st_mtime_ns
    (run / "events.out.tfevents.2.host").write_bytes(whole)
    os.utime(run, ns=(mtime, mtime))  # the same tick: the mtime did not move
    assert follower.read(1 << 30).scalars  # listed again all the same
    mtime = _age(run, 60)
    follower.read(1 << 30)
    assert follower.listings[""].trusted
    (run / "events.out.tfevents.3.host").write_bytes(whole)
    os.utime(run, ns=(mtime, mtime))
    assert follower.read(1 << 30).scalars == []  # trusted, and the mtime says nothing moved
    now[0] += RELIST_SECONDS
    assert follower.read(1 << 30).scalars  # listed again: the third file is found
