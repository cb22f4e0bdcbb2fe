"""Polling discovery's bound: a run written to the storage reaches the sink within the poll
interval + 1 s, right after start-up too, while the first full scan is still walking (on a
server it walks in spawned worker processes, whose start alone can take seconds)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tbhub.domain import watcher as watcher_module
from tbhub.domain.watcher import StorageWatcher
from tbhub.storage.sample_logs import write_run
from tbhub.storage.scan import RunInfo, ScanItem, scan_projects
from tests.storage.test_watcher import RecordingSink

POLL = 1.0
BOUND = POLL + 1.0
SLOW_FIRST_SCAN = 6.0  # what spawning the scan's workers cost on a busy two-core machine


def discovery_seconds(sink: RecordingSink, project: str, path: str, run: Path) -> float:
    started = time.monotonic()
    write_run(run, steps=3, tags=1)
    while sink.run(project, path) is None:
        assert time.monotonic() - started < 30, f"{project}/{path} never discovered"
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_run_written_right_after_start_up_is_discovered_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "storage"
    for project in ("vision", "speech", "audio"):
        write_run(root / project / "old", steps=3, tags=1)

    def slow_scan(items: Sequence[ScanItem]) -> list[list[RunInfo]]:
        time.sleep(SLOW_FIRST_SCAN)  # the workers' start-up
        return scan_projects(items)

    monkeypatch.setattr(watcher_module, "scan_projects", slow_scan)
    sink = RecordingSink()
    watcher = StorageWatcher(root, sink, mode="polling", poll_interval=POLL, min_gap=0.1)
    watcher.start()
    try:
        first = discovery_seconds(sink, "vision", "new", root / "vision" / "new")
        assert first <= BOUND, f"discovered {first:.2f}s after the write, right after start-up"
        assert not watcher.wait_ready(0), "the first scan was still walking meanwhile"
        assert watcher.wait_ready(30)
        assert sink.run("speech", "old") is not None and sink.run("vision", "new") is not None
        steady = discovery_seconds(sink, "speech", "next", root / "speech" / "next")
        assert steady <= BOUND, f"discovered {steady:.2f}s after the write"
    finally:
        watcher.stop()
