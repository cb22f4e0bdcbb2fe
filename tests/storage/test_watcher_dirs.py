"""The storage watcher and directories that come and go, on a real directory with watchdog's
real observers: the compare boards' views of hard links (storage/compare_view.py), built and
removed again and again, get no inotify watch and no warning of a watch registered twice;
a run's directory removed and made again, or moved to the trash and back, is still watched,
also from a trash outside the storage root (TBHUB_TRASH_ROOT), which watchdog registers again
with the warning the watcher filters."""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.domain.observers import WatchMode
from tbhub.domain.watcher import StorageWatcher
from tbhub.storage.compare_view import COMPARE_DIR_NAME, ViewRun, remove_views, sync_view
from tbhub.storage.sample_logs import write_run
from tbhub.storage.scan import RunInfo
from tests.e2e.harness import wait_until
from tests.storage.test_watcher import POLL, WAIT, RecordingSink
from tests.support.inotify_watches import directory_inodes, watched_inodes

SLUG = "cmp-0123456789ab"
REREGISTERED = "already exists for watch"


def start_watcher(storage: Path, mode: WatchMode) -> tuple[StorageWatcher, RecordingSink]:
    sink = RecordingSink()
    watcher = StorageWatcher(storage, sink, mode=mode, poll_interval=POLL, min_gap=0.1,
                             unwatched=[storage / COMPARE_DIR_NAME])  # fmt: skip
    watcher.start()
    assert watcher.wait_ready(30)
    return watcher, sink


@pytest.fixture
def watched(storage: Path, mode: WatchMode) -> Iterator[tuple[StorageWatcher, RecordingSink]]:
    watcher, sink = start_watcher(storage, mode)
    try:
        yield watcher, sink
    finally:
        watcher.stop()


def test_a_views_directories_get_no_watch_and_no_reregistration_warning(storage: Path) -> None:
    runs = []
    for index in range(12):
        path = f"exp-{index % 3}/run-{index:02d}"
        write_run(storage / "vision" / path / "train", run_index=index, steps=2, tags=1)
        runs.append(ViewRun("vision", path))
    compare_root = storage / COMPARE_DIR_NAME
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what a server's stderr would show
        watcher, _sink = start_watcher(storage, "inotify")
        try:
            for _ in range(6):  # as boards start and stop: built, synced again, removed
                sync_view(storage, compare_root, SLUG, runs)
                write_run(storage / "vision" / "exp-0" / "run-00" / "eval", steps=2, tags=1)
                sync_view(storage, compare_root, SLUG, runs)
                time.sleep(0.2)  # the observer's walks of what was made
                # (An inode is compared only while its directory exists: a removed one's
                # number is soon another directory's.)
                view_dirs = directory_inodes(compare_root)
                assert not view_dirs & watched_inodes(os.getpid()), "a view's directory is watched"
                remove_views(compare_root, keep=())
                shutil.rmtree(storage / "vision" / "exp-0" / "run-00" / "eval")
            assert directory_inodes(storage / "vision") <= watched_inodes(os.getpid()), (
                "the projects' directories are watched"
            )
        finally:
            watcher.stop()
    assert [str(w.message) for w in caught if REREGISTERED in str(w.message)] == []


def test_a_run_directory_removed_and_made_again_is_still_watched(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    run_dir = storage / "vision" / "exp" / "run-1"
    write_run(run_dir, steps=5)
    wait_until(lambda: sink.run("vision", "exp/run-1"), timeout=WAIT, what="discovery")
    shutil.rmtree(storage / "vision" / "exp")
    wait_until(lambda: sink.run("vision", "exp/run-1") is None, timeout=WAIT, what="gone")
    write_run(run_dir, steps=5)
    wait_until(lambda: sink.run("vision", "exp/run-1"), timeout=WAIT, what="found again")
    write_run(run_dir, steps=7)  # a file written into the re-created directory
    counted = wait_until(lambda: (r := sink.run("vision", "exp/run-1")) and r.files == 2 and r,
                         timeout=WAIT, what="the new file counted")  # fmt: skip
    assert isinstance(counted, RunInfo)
    assert counted.bytes == sum(p.stat().st_size for p in run_dir.iterdir())


def test_a_run_moved_to_the_trash_and_back_is_still_watched(
    storage: Path, watched: tuple[StorageWatcher, RecordingSink]
) -> None:
    _watcher, sink = watched
    run_dir = storage / "vision" / "run-1"
    write_run(run_dir, steps=5)
    wait_until(lambda: sink.run("vision", "run-1"), timeout=WAIT, what="discovery")
    trash = storage / ".tbhub-trash" / "7"
    trash.mkdir(parents=True)
    run_dir.rename(trash / "run-1")
    wait_until(lambda: sink.run("vision", "run-1") is None, timeout=WAIT, what="gone")
    (trash / "run-1").rename(run_dir)
    wait_until(lambda: sink.run("vision", "run-1"), timeout=WAIT, what="restored")
    write_run(run_dir, steps=7)
    wait_until(lambda: (r := sink.run("vision", "run-1")) and r.files == 2, timeout=WAIT,
               what="a file written after the restore counted")  # fmt: skip


def test_a_run_moved_out_of_the_root_and_back_is_watched_with_no_warning(
    tmp_path: Path, storage: Path
) -> None:
    # inotify keeps watching a directory moved out of the watched tree; moved back, watchdog
    # registers it again and warns that it did.
    run_dir = storage / "vision" / "run-1"
    trash = tmp_path / "trash-elsewhere"
    trash.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watcher, sink = start_watcher(storage, "inotify")
        try:
            write_run(run_dir / "train", steps=5)
            wait_until(lambda: sink.run("vision", "run-1/train"), timeout=WAIT, what="discovery")
            run_dir.rename(trash / "run-1")
            wait_until(lambda: sink.run("vision", "run-1/train") is None, timeout=WAIT,
                       what="gone")  # fmt: skip
            (trash / "run-1").rename(run_dir)
            wait_until(lambda: sink.run("vision", "run-1/train"), timeout=WAIT, what="back")
            write_run(run_dir / "train", steps=7)
            wait_until(lambda: (r := sink.run("vision", "run-1/train")) and r.files == 2,
                       timeout=WAIT, what="a file written after the move back counted")  # fmt: skip
        finally:
            watcher.stop()
    assert [str(w.message) for w in caught if REREGISTERED in str(w.message)] == []
