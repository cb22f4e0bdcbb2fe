"""Uploads on a real filesystem, over their whole class: event files only ever show whole
records however the chunks are cut (records larger than a chunk too) and wherever the upload
stops; every file name up to the bounds is uploaded or refused with a typed 400; any number
of racing uploads of one file end as one of them, never as an error."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tbhub.core.errors import NameTooLong, OffsetMismatch, UnsafePath
from tbhub.core.upload_protocol import MAX_NAME_BYTES, check_upload_path, hidden_name
from tbhub.storage.tfrecord import chunk_ends, framed
from tbhub.storage.uploads import append_chunk, file_state, list_files
from tests.storage.test_upload_store import EVENTS, no_limit, put


@pytest.fixture(scope="module")
def event_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real event file (TensorBoard's writer): scalars, one 300 kB record, more scalars."""
    logdir = tmp_path_factory.mktemp("job")
    writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=120)
    for step in range(40):
        value = Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
        writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=[value])))
        if step == 20:
            big = Summary.Image(encoded_image_string=random.Random(1).randbytes(300_000))
            image = Summary(value=[Summary.Value(tag="big", image=big)])
            writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=image))
    writer.close()
    (path,) = logdir.iterdir()
    return path.read_bytes()


def record_ends(path: Path) -> list[int]:
    """Where each record ends, as TensorBoard's own reader reads the file."""
    ends, pos = [0], 0
    for record in RawEventFileLoader(str(path)).Load():
        pos += len(record) + 16
        ends.append(pos)
    return ends


CUTTERS: dict[str, Callable[[bytes], list[int]]] = {
    "the uploader's cuts, 64 KiB chunks": lambda data: list(
        chunk_ends(data, 0, len(data), 64 << 10)
    ),
    "every 1000 bytes": lambda data: [*range(1000, len(data), 1000), len(data)],
    "random cuts": lambda data: [
        *sorted(random.Random(7).sample(range(1, len(data)), 60)),
        len(data),
    ],
}


@pytest.mark.parametrize("cutter", CUTTERS.values(), ids=CUTTERS.keys())
def test_an_event_file_shows_only_whole_records_wherever_the_upload_stops(
    cutter: Callable[[bytes], list[int]], event_file: bytes, run_fd: int, run_dir: Path
) -> None:
    source_ends = set(record_ends_of(event_file, run_dir.parent))
    start = 0
    for end in cutter(event_file):
        assert put(run_fd, EVENTS, start, event_file[start:end]) == end
        visible = (run_dir / EVENTS).read_bytes()
        assert event_file.startswith(visible)
        assert len(visible) in source_ends  # killed here, the board would read whole records
        assert file_state(run_fd, [EVENTS]).offset == end  # the upload resumes from here
        start = end
    assert (run_dir / EVENTS).read_bytes() == event_file
    assert [state.path for state in list_files(run_fd)] == [EVENTS]  # the tail is gone


def record_ends_of(data: bytes, where: Path) -> list[int]:
    copy = where / "copy.tfevents"
    copy.write_bytes(data)
    try:
        return record_ends(copy)
    finally:
        copy.unlink()


def test_the_uploader_cuts_chunks_at_record_ends_and_only_a_record_larger_inside(
    event_file: bytes, tmp_path: Path
) -> None:
    ends = set(record_ends_of(event_file, tmp_path))
    cuts = list(chunk_ends(event_file, 0, len(event_file), 64 << 10))
    starts = [0, *cuts[:-1]]
    assert all(b - a <= 64 << 10 for a, b in zip(starts, cuts, strict=True))
    inside = [cut for cut in cuts if cut not in ends]
    big_start, big_end = next(
        (a, b) for a, b in zip(sorted(ends), sorted(ends)[1:], strict=False) if b - a > 64 << 10
    )
    assert inside and all(big_start < cut < big_end for cut in inside)


def test_a_retry_of_a_held_back_piece_succeeds_and_a_wrong_offset_names_the_end(
    run_fd: int, run_dir: Path
) -> None:
    record = framed(b"x" * 100)
    assert put(run_fd, EVENTS, 0, record[:50]) == 50
    assert put(run_fd, EVENTS, 0, record[:50]) == 50  # the lost answer's retry
    assert (run_dir / EVENTS).read_bytes() == b""
    with pytest.raises(OffsetMismatch) as caught:
        put(run_fd, EVENTS, 40, b"zz")
    assert caught.value.offset == 50
    assert put(run_fd, EVENTS, 50, record[50:]) == len(record)
    assert (run_dir / EVENTS).read_bytes() == record


def test_a_tail_left_by_a_crash_between_the_two_writes_is_ignored(
    run_fd: int, run_dir: Path
) -> None:
    first, second = framed(b"a" * 40), framed(b"b" * 40)
    put(run_fd, EVENTS, 0, first + second[:10])
    tail = run_dir / hidden_name(EVENTS)
    assert tail.exists() and "tfevents" not in tail.name
    # The crash: the event file got the record, the tail was not replaced yet.
    with open(run_dir / EVENTS, "ab") as fh:
        fh.write(second)
    end = len(first + second)
    assert file_state(run_fd, [EVENTS]).offset == end
    assert put(run_fd, EVENTS, end, first) == end + len(first)
    assert (run_dir / EVENTS).read_bytes() == first + second + first


def test_bytes_that_are_not_tfrecord_framing_go_through_as_they_are(
    run_fd: int, run_dir: Path
) -> None:
    assert put(run_fd, EVENTS, 0, b"not a record at all, " * 10) == 210
    assert (run_dir / EVENTS).read_bytes() == b"not a record at all, " * 10


@pytest.mark.parametrize("events", [False, True], ids=["file", "events"])
def test_every_file_name_length_is_uploaded_or_refused_with_a_typed_error(
    events: bool, run_fd: int, run_dir: Path
) -> None:
    stem = "events.out.tfevents.1." if events else "h"
    for length in range(len(stem), MAX_NAME_BYTES + 2):
        name = stem + "x" * (length - len(stem))
        try:
            parts = check_upload_path(f"d/{name}")
        except NameTooLong as exc:
            assert exc.http_status == 400 and "shorten it" in exc.message
            assert length > 200
            continue
        data = framed(b"x" * 10 + name.encode())
        state = append_chunk(run_fd, parts, offset=0, data=data[:20], complete=False, room=no_limit)
        state = append_chunk(run_fd, parts, offset=20, data=data[20:], complete=True, room=no_limit)
        assert state.offset == len(data)
        assert (run_dir / "d" / name).read_bytes() == data
    assert {p.name for p in (run_dir / "d").iterdir() if p.name.startswith(".")} == set()


@pytest.mark.parametrize("same", [True, False], ids=["same-content", "different-content"])
def test_racing_whole_file_uploads_of_one_file_all_end_well(
    same: bool, run_fd: int, run_dir: Path
) -> None:
    versions = [os.urandom(1 << 16) for _ in range(8)]
    if same:
        versions = [versions[0]] * 8
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def upload(data: bytes) -> None:
        barrier.wait()
        try:
            for _ in range(5):
                put(run_fd, "model.bin", 0, data, complete=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(v,)) for v in versions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (run_dir / "model.bin").read_bytes() in versions
    assert sorted(os.listdir(run_dir)) == ["model.bin"]


def test_racing_uploads_of_one_event_file_keep_it_whole(
    event_file: bytes, run_fd: int, run_dir: Path
) -> None:
    cuts = list(chunk_ends(event_file, 0, len(event_file), 64 << 10))
    chunk_end = dict(zip([0, *cuts[:-1]], cuts, strict=True))
    errors: list[BaseException] = []

    def upload() -> None:
        start = 0
        try:
            while start < len(event_file):
                try:
                    start = put(run_fd, EVENTS, start, event_file[start : chunk_end[start]])
                except OffsetMismatch as exc:  # another racer is ahead: go on from its end
                    start = exc.offset
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=upload) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (run_dir / EVENTS).read_bytes() == event_file


def test_a_tail_name_that_is_not_a_plain_file_is_never_read_or_written(
    run_fd: int, run_dir: Path
) -> None:
    first = framed(b"a" * 40)
    put(run_fd, EVENTS, 0, first)
    os.mkfifo(run_dir / hidden_name(EVENTS))
    assert file_state(run_fd, [EVENTS]).offset == len(first)
    with pytest.raises(UnsafePath):
        put(run_fd, EVENTS, len(first), first[:10])
    assert (run_dir / EVENTS).read_bytes() == first
