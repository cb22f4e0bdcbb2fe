"""CPU the storage watcher uses while nothing changes, over 100,000 files (inotify mode).

A storage root with one project of 10,000 runs x 10 files (one event file each) is created
in a scratch directory; the watcher (tbhub.domain.watcher.StorageWatcher, as `tbhub serve`
runs it, with a sink that only counts) starts, finishes its first scan, and then the CPU
time of this process is read over an idle window. Nothing else runs in this process, so
its CPU time is the watcher's. Reported per window and as the median, in % of one core;
the target is <= 2%.

    .venv/bin/python bench/watcher_idle_cpu.py [--runs 3] [--window 20] [--json]
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from _processes import temp_dir
from _reports import arguments, log, median, report
from tbhub.domain.watcher import ProjectChanges, StorageWatcher

RUNS, FILES_PER_RUN = 10_000, 10
TARGET_PERCENT = 2.0


class CountingSink:
    def __init__(self) -> None:
        self.runs = 0

    def record(self, changes: list[ProjectChanges]) -> None:
        self.runs += sum(len(change.runs) for change in changes)


def make_tree(root: Path) -> None:
    for run in range(RUNS):
        directory = root / "bench" / f"group-{run // 100:03d}" / f"run-{run:05d}"
        directory.mkdir(parents=True)
        for index in range(FILES_PER_RUN):
            name = "events.out.tfevents.1700000000.h" if index == 0 else f"asset-{index}.bin"
            os.close(os.open(directory / name, os.O_WRONLY | os.O_CREAT, 0o644))


def main() -> None:
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--window", type=float, default=20.0, help="seconds per window")
    args = parser.parse_args()
    with temp_dir("tbhub-bench-watcher.") as work:
        log(f"creating {RUNS * FILES_PER_RUN:,} files ...")
        make_tree(work)
        sink = CountingSink()
        watcher = StorageWatcher(work, sink, mode="inotify")
        started = time.monotonic()
        watcher.start()
        try:
            assert watcher.wait_ready(600)
            log(f"first scan: {sink.runs} runs in {time.monotonic() - started:.1f}s")
            assert sink.runs == RUNS, sink.runs
            time.sleep(2.0)  # let the start-up settle
            percents = []
            for index in range(args.runs):
                cpu, wall = time.process_time(), time.monotonic()
                time.sleep(args.window)
                share = (time.process_time() - cpu) / (time.monotonic() - wall) * 100
                percents.append(share)
                log(f"window {index + 1}/{args.runs}: {share:.4f}% of a core")
            # Still watching: a new run after the idle windows is reported.
            before = sink.runs
            fresh = work / "bench" / "fresh-run"
            fresh.mkdir()
            (fresh / "events.out.tfevents.1700000001.h").write_bytes(b"x")
            deadline = time.monotonic() + 10
            while sink.runs == before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sink.runs == before + 1, "the watcher missed a new run after idling"
        finally:
            watcher.stop()
    result = {"files": RUNS * FILES_PER_RUN, "runs": RUNS, "window_seconds": args.window,
              "cpu_percent": percents, "median_percent": median(percents),
              "target_percent": TARGET_PERCENT}  # fmt: skip
    report(result, as_json=args.json, to_log=True, text=(
        f"idle watcher over {RUNS * FILES_PER_RUN:,} files: {median(percents):.4f}% of a core "
        f"(target <= {TARGET_PERCENT}%)"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
