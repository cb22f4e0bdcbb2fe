"""Event files rewritten in place (storage/event_health.py): what counts as a rewrite, on
real event files from TensorBoard's writer, and the restart requests' rate limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tbhub.storage.event_health import FramingWatch, Healer
from tbhub.storage.sample_logs import write_run


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
