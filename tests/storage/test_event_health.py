"""Event files rewritten in place (storage/event_health.py): what counts as a rewrite, on
real event files from TensorBoard's writer, and the restart requests' rate limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tbhub.storage.event_health import WALK_CHUNK, FramingWatch, Healer, _walk
from tbhub.storage.sample_logs import write_run
from tbhub.storage.tfrecord import HEADER_BYTES, RECORD_OVERHEAD, framed, record_length


@pytest.fixture
def real_bytes(tmp_path: Path) -> bytes:
    write_run(tmp_path / "writer", steps=20, tags=2)
    [event_file] = list((tmp_path / "writer").iterdir())
    return event_file.read_bytes()


@pytest.fixture
def late(tmp_path: Path) -> Path:
    path = tmp_path / "storage" / "vision" / "run" / "events.out.tfevents.1.host.1.0"
    path.parent.mkdir(parents=True)
    return path


def test_a_zero_filled_file_filled_in_place_is_a_rewrite_once(
    tmp_path: Path, late: Path, real_bytes: bytes
) -> None:
    watch = FramingWatch(tmp_path / "storage")
    late.write_bytes(bytes(len(real_bytes)))
    assert not watch.rewritten("vision", "run/" + late.name)
    assert not watch.rewritten("vision", "run/" + late.name), "still zeros: nothing new"
    with open(late, "r+b") as rewrite:
        rewrite.write(real_bytes)
    assert watch.rewritten("vision", "run/" + late.name)
    assert not watch.rewritten("vision", "run/" + late.name)


def test_appends_and_a_record_being_written_are_no_rewrite(
    tmp_path: Path, late: Path, real_bytes: bytes
) -> None:
    watch = FramingWatch(tmp_path / "storage")
    for end in (0, 5, 40, len(real_bytes) // 2, len(real_bytes) - 3, len(real_bytes)):
        late.write_bytes(real_bytes[:end])  # the same bytes, growing: a writer appending
        assert not watch.rewritten("vision", "run/" + late.name), end


def test_a_file_that_shrank_was_written_over(tmp_path: Path, late: Path, real_bytes: bytes) -> None:
    watch = FramingWatch(tmp_path / "storage")
    late.write_bytes(real_bytes)
    assert not watch.rewritten("vision", "run/" + late.name)
    late.write_bytes(real_bytes[:100])
    assert watch.rewritten("vision", "run/" + late.name)


def test_a_symlinked_event_file_is_never_read(tmp_path: Path, late: Path) -> None:
    late.symlink_to("/etc/passwd")
    assert not FramingWatch(tmp_path / "storage").rewritten("vision", "run/" + late.name)


def test_restart_requests_are_rate_limited_per_project() -> None:
    now = [1000.0]
    sent: list[str] = []
    healer = Healer(lambda project, why: sent.append(project), min_gap=60, clock=lambda: now[0])
    healer.rewritten("vision", "x")
    healer.rewritten("speech", "x")
    assert sent == ["vision", "speech"] and healer.due() is None
    now[0] += 10
    healer.rewritten("vision", "again")
    healer.rewritten("vision", "and again")
    assert sent == ["vision", "speech"] and healer.due() == 50
    now[0] += 50
    healer.send_due()
    assert sent == ["vision", "speech", "vision"] and healer.due() is None


def _walk_header_by_header(fd: int, start: int, size: int) -> tuple[int, int | None]:
    """The walk as it was: one 12-byte read per record (the reference for the chunked one)."""
    pos = start
    while pos + HEADER_BYTES <= size:
        length = record_length(os.pread(fd, HEADER_BYTES, pos))
        if length is None:
            return pos, pos
        if pos + length + RECORD_OVERHEAD > size:
            break
        pos += length + RECORD_OVERHEAD
    return pos, None


def test_the_chunked_header_walk_ends_where_one_read_per_header_ends(late: Path) -> None:
    # Records small and large (one far over a chunk), so that chunks end inside headers,
    # inside data and exactly on boundaries; then a broken header, and cuts of every kind.
    sizes = [0, 1, 30, WALK_CHUNK - 20, 7, 3 * WALK_CHUNK, 11, 5, WALK_CHUNK // 2, 64]
    whole = b"".join(framed(bytes([n % 251]) * n) for n in sizes)
    broken = bytearray(whole + framed(b"after"))
    broken[len(whole) + 4] ^= 0xFF  # the length's CRC of the last header
    bounds = {0, len(whole), len(broken)}
    for at in range(0, len(whole), WALK_CHUNK // 3):
        bounds |= {at, at + 5, at + 12}
    for data in (whole, bytes(broken)):
        late.write_bytes(data)
        fd = os.open(late, os.O_RDONLY)
        try:
            for start in (0, HEADER_BYTES + RECORD_OVERHEAD):  # after the empty first record
                for size in sorted(b for b in bounds if start <= b <= len(data)):
                    expected = _walk_header_by_header(fd, start, size)
                    assert _walk(fd, start, size) == expected, (start, size)
        finally:
            os.close(fd)


def test_files_looked_at_together_through_their_project_directory(
    tmp_path: Path, late: Path, real_bytes: bytes
) -> None:
    watch = FramingWatch(tmp_path / "storage")
    other = late.parent / "events.out.tfevents.2.host.1.0"
    late.write_bytes(bytes(len(real_bytes)))
    other.write_bytes(real_bytes)
    paths = ["run/" + late.name, "run/" + other.name, "run/gone"]
    assert watch.rewritten_among("vision", paths) == []
    with open(late, "r+b") as rewrite:
        rewrite.write(real_bytes)
    other.write_bytes(real_bytes[:100])
    assert watch.rewritten_among("vision", paths) == paths[:2]
    assert watch.rewritten_among("vision", paths) == []
    # A project directory that is a symlink is never read, and what was seen is forgotten.
    (tmp_path / "storage" / "vision").rename(tmp_path / "elsewhere")
    (tmp_path / "storage" / "vision").symlink_to(tmp_path / "elsewhere")
    assert watch.rewritten_among("vision", paths) == []
    assert not watch._files
