"""The storage watcher on a real directory with watchdog's real observers (inotify and
polling): runs are discovered, kept current and dropped; symlinks out of a project are not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.domain.watcher import ProjectChanges, StorageWatcher, WatchMode
from tbhub.storage.sample_logs import write_run
from tbhub.storage.scan import RunInfo
from tests.e2e.harness import wait_until

POLL = 0.3
WAIT = 15.0  # generous: how fast is bench/discovery_latency.py's question


class RecordingSink:
    """Keeps the latest state the watcher reported, like the runs table would."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], RunInfo] = {}
        self.gone: list[tuple[str, str]] = []
        self.calls = 0
        self.lock = threading.Lock()

    def record(self, changes: list[ProjectChanges]) -> None:
        with self.lock:
            self.calls += 1
            for change in changes:
                for run in change.runs:
                    self.runs[(change.project, run.path)] = run
                for path in change.gone:
                    self.runs.pop((change.project, path), None)
                    self.gone.append((change.project, path))

    def run(self, project: str, path: str) -> RunInfo | None:
        with self.lock:
            return self.runs.get((project, path))


@pytest.fixture
def watched(storage: Path, mode: WatchMode) -> Iterator[tuple[StorageWatcher, RecordingSink]]:
    sink = RecordingSink()
    watcher = StorageWatcher(storage, sink, mode=mode, poll_interval=POLL, min_gap=0.1)
    watcher.start()
    try:
        assert watcher.wait_ready(30)
        yield watcher, sink
    finally:
        watcher.stop()


def test_first_scan_reports_existing_runs(storage: Path, mode: WatchMode) -> None:
    write_run(storage / "vision" / "old" / "run-1", steps=5)
    sink = RecordingSink()
    watcher = StorageWatcher(storage, sink, mode=mode, poll_interval=POLL)
    watcher.start()
    try:
        assert watcher.wait_ready(30)
        run = sink.run("vision", "old/run-1")
        assert run is not None and run.files == 1 and run.bytes > 0
        assert watcher.index.project_bytes("vision") == run.bytes
    finally:
        watcher.stop()


def test_a_new_run_is_discovered(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    write_run(storage / "vision" / "exp" / "run-1", steps=10)
    run = wait_until(
        lambda: sink.run("vision", "exp/run-1"), timeout=WAIT, what="the run discovered"
    )
    event_file = next((storage / "vision" / "exp" / "run-1").iterdir())
    assert isinstance(run, RunInfo)
    assert (run.files, run.bytes) == (1, event_file.stat().st_size)
    assert run.last_write == event_file.stat().st_mtime


def test_size_and_last_write_follow_appends(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    write_run(storage / "vision" / "run-1", steps=5)
    first = wait_until(lambda: sink.run("vision", "run-1"), timeout=WAIT, what="discovery")
    assert isinstance(first, RunInfo)
    write_run(storage / "vision" / "run-1", steps=50)  # a second event file, as after a restart
    grown = wait_until(
        lambda: (r := sink.run("vision", "run-1")) and r.files == 2 and r,
        timeout=WAIT,
        what="the run's second file counted",
    )
    total = sum(p.stat().st_size for p in (storage / "vision" / "run-1").iterdir())
    assert isinstance(grown, RunInfo) and grown.bytes == total > first.bytes


def test_removed_run_is_reported_gone(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    write_run(storage / "vision" / "run-1", steps=5)
    wait_until(lambda: sink.run("vision", "run-1"), timeout=WAIT, what="discovery")
    (storage / ".tbhub-trash").mkdir()
    (storage / "vision" / "run-1").rename(storage / ".tbhub-trash" / "run-1")
    wait_until(lambda: ("vision", "run-1") in sink.gone, timeout=WAIT, what="the run reported gone")
    assert sink.run("vision", "run-1") is None


def test_symlink_out_of_the_project_is_ignored(
    tmp_path: Path, storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    outside = tmp_path / "outside"
    write_run(outside / "secret-run", steps=5)
    (storage / "vision" / "link").symlink_to(outside, target_is_directory=True)
    (storage / "vision" / "events-link").mkdir()
    (storage / "vision" / "events-link" / "events.out.tfevents.1.h").symlink_to(
        next((outside / "secret-run").iterdir())
    )
    write_run(outside / "secret-run", steps=5)  # activity behind the link
    write_run(storage / "vision" / "real", steps=5)  # and a real run after it
    wait_until(lambda: sink.run("vision", "real"), timeout=WAIT, what="the real run")
    with sink.lock:
        paths = sorted(path for (_project, path) in sink.runs)
    assert paths == ["real"]


def test_nothing_outside_projects_becomes_a_run(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    write_run(storage / ".tbhub-trash" / "7" / "run-1", steps=5)
    write_run(storage / "vision" / "events-in-project-dir-are-not-a-run", steps=5)
    write_run(storage / "Not-A-Slug" / "run-1", steps=5)
    wait_until(
        lambda: sink.run("vision", "events-in-project-dir-are-not-a-run"),
        timeout=WAIT,
        what="the control run",
    )
    with sink.lock:
        assert [key for key in sink.runs] == [("vision", "events-in-project-dir-are-not-a-run")]


def test_a_failing_sink_gets_the_changes_again(storage: Path) -> None:
    sink = RecordingSink()
    failures = [RuntimeError("database down")]
    real_record = sink.record

    def flaky(changes: list[ProjectChanges]) -> None:
        if failures and changes:
            raise failures.pop()
        real_record(changes)

    sink.record = flaky  # type: ignore[method-assign]
    watcher = StorageWatcher(storage, sink, mode="inotify", retry_after=0.1, min_gap=0.1)
    watcher.start()
    try:
        assert watcher.wait_ready(30)
        write_run(storage / "vision" / "run-1", steps=5)
        wait_until(lambda: sink.run("vision", "run-1"), timeout=5, what="the retried record")
        assert failures == []
    finally:
        watcher.stop()
