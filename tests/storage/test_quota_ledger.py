"""The upload quota's ledger (storage/quota_ledger.py): two ledgers on one directory stand
for two processes of one server, and a walk is a number the test gives; then chunks through
storage/receive.py on real files, their bytes let in, given back, or never asked for."""

from __future__ import annotations

import errno
import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tbhub.core.errors import InsufficientStorage
from tbhub.storage import quota_ledger
from tbhub.storage.quota_ledger import QuotaLedger
from tbhub.storage.receive import UploadTarget, receive_chunk
from tbhub.storage.usage import ProjectUsage

QUOTA = 1000


def walking(found: int, walks: list[int] | None = None) -> Callable[[], int]:
    def walk() -> int:
        if walks is not None:
            walks.append(found)
        return found

    return walk


def test_a_second_process_sees_the_firsts_reservations_at_once(tmp_path: Path) -> None:
    first, second = QuotaLedger(tmp_path), QuotaLedger(tmp_path)
    assert first.reserve("vision", 600, QUOTA, walking(100)).granted
    refused = second.reserve("vision", 301, QUOTA, walking(100))
    assert not refused.granted and refused.used == 700
    assert second.reserve("vision", 300, QUOTA, walking(100)).granted
    assert not first.reserve("vision", 1, QUOTA, walking(100)).granted


def test_a_released_reservation_frees_its_room(tmp_path: Path) -> None:
    first, second = QuotaLedger(tmp_path), QuotaLedger(tmp_path)
    assert first.reserve("vision", 900, QUOTA, walking(0)).granted
    assert not second.reserve("vision", 200, QUOTA, walking(0)).granted
    first.settle("vision", 900, 0)  # the write failed: nothing landed
    assert second.reserve("vision", 1000, QUOTA, walking(0)).granted


def test_a_chunk_that_wrote_less_gives_back_the_rest(tmp_path: Path) -> None:
    ledger = QuotaLedger(tmp_path)
    assert ledger.reserve("vision", 800, QUOTA, walking(0)).granted
    ledger.settle("vision", 800, 300)
    assert ledger.reserve("vision", 0, QUOTA, walking(0)).used == 300


def test_concurrent_chunks_cannot_both_pass_the_last_bytes(tmp_path: Path) -> None:
    granted: list[bool] = []
    start = threading.Barrier(16)

    def send() -> None:
        ledger = QuotaLedger(tmp_path)  # a file of its own opened each time, as processes do
        start.wait()
        granted.append(ledger.reserve("vision", 100, QUOTA, walking(50)).granted)

    threads = [threading.Thread(target=send) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 9  # 50 + 9 * 100 <= 1000 < 50 + 10 * 100


def test_a_new_walk_counts_what_settled_after_it_began_and_not_a_failed_chunk(
    tmp_path: Path,
) -> None:
    ledger = QuotaLedger(tmp_path, ttl=0)  # every reservation walks again
    assert ledger.reserve("vision", 400, QUOTA, walking(0)).granted  # in flight over the walk
    assert ledger.reserve("vision", 200, QUOTA, walking(0)).granted
    ledger.settle("vision", 200, 200)
    # This walk saw the settled 200 bytes but not the 400 still being written.
    assert ledger.reserve("vision", 0, QUOTA, walking(200)).used == 600
    ledger.settle("vision", 400, 0)  # that write failed
    assert ledger.reserve("vision", 0, QUOTA, walking(200)).used == 200


def test_one_process_walks_a_project_once_a_ttl_for_all(tmp_path: Path) -> None:
    walks: list[int] = []
    first, second = QuotaLedger(tmp_path, ttl=60), QuotaLedger(tmp_path, ttl=60)
    for ledger in (first, second, first, second):
        assert ledger.reserve("vision", 10, QUOTA, walking(0, walks)).granted
    assert walks == [0]


def test_a_walk_that_fails_lets_nothing_in_and_the_next_asker_walks_at_once(
    tmp_path: Path,
) -> None:
    ledger = QuotaLedger(tmp_path, ttl=0.5)
    assert ledger.reserve("vision", 100, QUOTA, walking(0)).granted
    ledger.settle("vision", 100, 100)
    time.sleep(0.6)  # the walk is due

    def lost() -> int:
        raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    with pytest.raises(OSError, match="not connected"):
        ledger.reserve("vision", 900, QUOTA, lost)
    # Its claim was given back: the next asker walks, instead of deciding on the old walk
    # for a ttl while nobody walks; and the failed chunk was never counted.
    walks: list[int] = []
    decision = ledger.reserve("vision", 900, QUOTA, walking(100, walks))
    assert walks == [100] and decision.granted and decision.used == 100


def test_a_project_without_a_walk_is_walked_before_anything_is_let_in(tmp_path: Path) -> None:
    decision = QuotaLedger(tmp_path).reserve("vision", 100, QUOTA, walking(950))
    assert not decision.granted and decision.used == 950


def test_clear_forgets_every_chunk_in_flight(tmp_path: Path) -> None:
    ledger = QuotaLedger(tmp_path / "ledger")
    assert ledger.reserve("vision", 900, QUOTA, walking(0)).granted  # never settled
    ledger.clear()
    assert ledger.reserve("vision", 900, QUOTA, walking(0)).granted


# A process that lets a 900-byte chunk in, says so, and waits (to be killed before it settles).
LETS_IN_AND_WAITS = """
import sys
from pathlib import Path
from tbhub.storage import quota_ledger
from tbhub.storage.quota_ledger import QuotaLedger
assert QuotaLedger(Path(sys.argv[1])).reserve("vision", 900, 1000, lambda: 0).granted
print("let in", flush=True)
sys.stdin.read()
"""


@contextmanager
def a_process_that_let_in(directory: Path) -> Iterator[None]:
    """A child process that has let a 900-byte chunk in, SIGKILLed (before it settles)
    when the block ends."""
    command = [sys.executable, "-c", LETS_IN_AND_WAITS, str(directory)]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "let in\n"
            yield
        finally:
            child.kill()
            child.wait(timeout=10)


def test_a_killed_process_chunk_is_given_back_at_the_next_walk_and_a_live_ones_is_not(
    tmp_path: Path,
) -> None:
    ledger = QuotaLedger(tmp_path, ttl=0)  # every reservation walks, and looks first
    with a_process_that_let_in(tmp_path):
        assert ledger.reserve("vision", 0, QUOTA, walking(0)).used == 900  # still writing
    decision = ledger.reserve("vision", 900, QUOTA, walking(0))
    assert decision.granted and decision.used == 0


def test_a_killed_process_chunk_waits_for_the_next_walk_which_counts_what_it_wrote(
    tmp_path: Path,
) -> None:
    with a_process_that_let_in(tmp_path):
        pass
    fresh = QuotaLedger(tmp_path, ttl=60)  # the child's walk is fresh: nobody walks yet
    assert fresh.reserve("vision", 0, QUOTA, walking(0)).used == 900  # the safe side
    walking_again = QuotaLedger(tmp_path, ttl=0)
    assert walking_again.reserve("vision", 0, QUOTA, walking(300)).used == 300  # it wrote 300


def test_a_pid_taken_by_another_process_is_not_the_process_that_let_a_chunk_in() -> None:
    pid, started = quota_ledger.this_process()
    assert quota_ledger.alive((pid, started))
    assert not quota_ledger.alive((pid, started - 5.0))  # this PID, an earlier process


def test_a_full_table_of_live_processes_counts_another_chunk_untracked() -> None:
    record = quota_ledger._Record()
    for pid in range(1, quota_ledger.SLOTS + 1):
        record.let_in((pid, 1.0), 10, lambda _owner: True)
    record.let_in((999, 1.0), 10, lambda _owner: True)
    assert record.reserved == 10 * (quota_ledger.SLOTS + 1)
    assert (999, 1.0) not in record.in_flight
    record.let_in((999, 1.0), 10, lambda owner: owner[0] != 1)  # process 1 is gone: room
    assert record.in_flight[(999, 1.0)] == 10 and (1, 1.0) not in record.in_flight
    assert quota_ledger._Record.unpack(record.pack()) == record


@pytest.mark.parametrize("project", ["../vision", "Vision", "", "a/b"])
def test_only_a_project_name_names_a_record(tmp_path: Path, project: str) -> None:
    with pytest.raises(ValueError, match="not a project name"):
        QuotaLedger(tmp_path).reserve(project, 1, QUOTA, walking(0))


def target(tmp_path: Path, quota: int | None, *, min_free: int = 0) -> UploadTarget:
    storage = tmp_path / "storage"
    (storage / "vision").mkdir(parents=True, exist_ok=True)
    usage = ProjectUsage(storage, QuotaLedger(tmp_path / "ledger"))
    return UploadTarget(storage, "vision", "run-1", quota, min_free, usage)


def send(target: UploadTarget, name: str, data: bytes) -> None:
    receive_chunk(target, [name], offset=0, pieces=[data],
                  sha256=hashlib.sha256(data).digest(), complete=True)  # fmt: skip


def test_a_chunk_whose_write_fails_gives_its_bytes_back(tmp_path: Path) -> None:
    with pytest.raises(InsufficientStorage, match="storage is full"):  # after its reservation
        send(target(tmp_path, QUOTA, min_free=2**62), "a.bin", b"a" * 600)
    send(target(tmp_path, QUOTA), "b.bin", b"b" * QUOTA)  # the whole quota was still free
    with pytest.raises(InsufficientStorage, match="retention quota"):
        send(target(tmp_path, QUOTA), "c.bin", b"c")
    assert sorted(path.name for path in (tmp_path / "storage" / "vision" / "run-1").iterdir()) == [
        "b.bin"
    ]


def test_a_project_without_a_quota_never_touches_the_ledger(tmp_path: Path) -> None:
    send(target(tmp_path, None), "a.bin", b"a" * 600)
    assert not (tmp_path / "ledger").exists()
