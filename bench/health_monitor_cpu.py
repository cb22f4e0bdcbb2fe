"""CPU the run-health monitor uses with 1,000 active runs each writing 10 scalars a second.

A scratch installation (SQLite, one project) gets `--runs-active` runs registered as a
training job registers them (status running). A writer process appends to every run's event
file: 10 scalars a second each (train/loss, train/grad_norm, train/learning_rate ... in
turn), flushed once a second per run, spread over the second. In this process something
tells the health monitor (health/monitor.py) which event files changed, and the monitor reads
each on from where it stopped, runs the detectors and records nothing (the curves are
healthy). What tells it: `--feed watcher` (default), the storage watcher as `tbhub serve`
runs it (inotify, feeding the runs table, with the registered runs' claims and the
rewritten-file healer); `--feed direct`, a thread that hands over every
file once a second, which is what a watcher that keeps up would report; `--feed passes`, no
threads and no writer process: each pass, this process appends a second of writing to every
run, hands every file over and times one pass in its own CPU time (`--window` passes a
window, after `--settle` passes), which a busy host disturbs least.

The figure is the monitor thread's own CPU time over each window, in % of one core (the
watcher's threads and the process in all are reported beside it); median over the windows.
Beside it, the bytes written and read in each window: a monitor that keeps up reads what is
written. Target: <= 10% of a core.

    .venv/bin/python bench/health_monitor_cpu.py [--runs 3] [--window 20]
        [--runs-active 1000] [--feed watcher|direct|passes] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from _health_writes import write_second
from _processes import temp_dir
from _reports import arguments, emit_report, median
from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.models import Incident, Run
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.domain.projects import create_project
from tbhub.domain.run_sink import DatabaseRunSink
from tbhub.domain.runs import RunFields, register_run
from tbhub.domain.watcher import StorageWatcher
from tbhub.health.monitor import HealthMonitor
from tbhub.storage.event_health import Healer
from tbhub.storage.scalars import ScalarCache, load_reader

PROJECT = "bench"
SCALARS_PER_SECOND = 10
TARGET_PERCENT = 10.0

# The writer: appends framed Event records to every run's event file (`write_second`), 10
# scalars a second each, one flush a second per run, the runs spread over the second.
WRITER = r"""
import json, random, sys, time
from _health_writes import write_second

handles = [open(path, "ab", buffering=0) for path in json.loads(sys.argv[1])]
rng = random.Random(0)
step, started = 0, time.monotonic()
while True:
    for index, handle in enumerate(handles):
        due = started + step + index / len(handles)
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        write_second([handle], step, rng)
    step += 1
    print(step, flush=True)
"""


@dataclass
class Sample:
    window: int
    seconds: float
    monitor_percent: float
    watcher_percent: float  # the feed's threads: the watcher's, or the direct feed's
    process_percent: float
    bytes_read: int
    bytes_written: int
    passes: int


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def thread_cpu(threads: list[threading.Thread]) -> float:
    """CPU seconds the given (running) threads have used."""
    total = 0.0
    for thread in threads:
        if thread.ident is not None and thread.is_alive():
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return total


class Feed(Protocol):
    def stop(self) -> None: ...


class DirectFeed:
    """Every event file handed to the monitor once a second, as a watcher that keeps up would."""

    def __init__(self, monitor: HealthMonitor, keys: set[tuple[str, str]]) -> None:
        self._stop = threading.Event()

        def feed() -> None:
            while not self._stop.wait(1.0):
                monitor.event_files(keys)

        self._thread = threading.Thread(target=feed, name="bench-feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def start_feed(kind: str, settings: Settings, factory: sessionmaker[Session],
               monitor: HealthMonitor, files: list[Path]) -> Feed:  # fmt: skip
    if kind == "direct":
        base = settings.storage / PROJECT
        return DirectFeed(monitor, {(PROJECT, str(f.relative_to(base))) for f in files})
    # As serve/duties.start_watcher makes it: the registered runs claim their subtrees (a
    # query per project per flush), and the healer's framing watch walks the record headers
    # of every event file heard about (no board here to restart: asking does nothing).
    sink = DatabaseRunSink(factory)
    watcher = StorageWatcher(settings.storage, sink, mode="inotify", claims=sink.registered,
                             healer=Healer(lambda project, why: None),
                             on_event_files=monitor.event_files)  # fmt: skip
    watcher.start()
    assert watcher.wait_ready(300)
    return watcher


def install(work: Path, runs: int) -> tuple[Settings, list[Path]]:
    """A migrated SQLite database, the project and `runs` registered runs with one event
    file each (its first record written, as a writer's file version record)."""
    settings = prepare_runtime(Settings(
        data_dir=work / "data", storage_root=work / "storage",
        database_url=f"sqlite:///{work / 'tbhub.sqlite3'}", secret_key="bench-" + "x" * 40,
        watch_mode="inotify",
    ))  # fmt: skip
    upgrade(settings.db_url)
    factory = make_session_factory(make_engine(settings.db_url))
    with transaction(factory) as session:
        project = create_project(session, name=PROJECT, storage_root=settings.storage,
                                 owner=None, actor="bench")  # fmt: skip
        project_id = project.id
    files = []
    for index in range(runs):
        run = register_run(factory, storage_root=settings.storage, project=PROJECT,
                           project_id=project_id, name=f"run-{index:04d}", group=None,
                           fields=RunFields(hparams={}, tags=[]), actor="bench")  # fmt: skip
        files.append(settings.storage / PROJECT / run.path / "events.out.tfevents.1.bench")
    return settings, files


def measure_passes(monitor: HealthMonitor, files: list[Path], args: argparse.Namespace,
                   project: str = PROJECT) -> list[Sample]:  # fmt: skip
    """`--feed passes`: no threads and no host in the figure but this one's CPU. Each pass, a
    second of writing is appended to every run (outside the measure), every file is handed
    over, and one `run_pass` is timed in this thread's CPU time; a window is `--window`
    passes. The figure is a pass's CPU in % of a core at one pass a second, which is how often
    the monitor reads 1,000 runs (its rest, at most MAX_REST)."""
    base = files[0].parent.parent
    keys = {(project, str(f.relative_to(base))) for f in files}
    handles = [f.open("ab", buffering=0) for f in files]
    rng, step, samples = random.Random(0), 0, []
    try:
        for _ in range(int(args.settle)):  # the detectors' windows fill, the caches warm
            write_second(handles, step, rng)
            step += 1
            monitor.event_files(keys)
            monitor.run_pass()
        for index in range(1, args.runs + 1):
            cpu, read, written = [], monitor.stats.bytes_read, 0
            for _ in range(int(args.window)):
                sizes = sum(f.stat().st_size for f in files)
                write_second(handles, step, rng)
                step += 1
                written += sum(f.stat().st_size for f in files) - sizes
                monitor.event_files(keys)
                started = time.thread_time()
                monitor.run_pass()
                cpu.append(time.thread_time() - started)
            percent = 100 * median(cpu)
            sample = Sample(index, sum(cpu), percent, 0.0, percent,
                            monitor.stats.bytes_read - read, written, len(cpu))  # fmt: skip
            samples.append(sample)
            log(f"window {index}/{args.runs}: a pass {1000 * median(cpu):.1f} ms of CPU "
                f"(median of {len(cpu)}), {percent:.2f}% of a core at a pass a second; "
                f"{written} bytes written, {sample.bytes_read} read")  # fmt: skip
    finally:
        for handle in handles:
            handle.close()
    return samples


def main() -> None:
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--window", type=float, default=20.0, help="seconds per window")
    parser.add_argument("--runs-active", type=int, default=1000, help="runs writing")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds before measuring")
    parser.add_argument("--feed", choices=("watcher", "direct", "passes"), default="watcher",
                        help="what tells the monitor which files changed")  # fmt: skip
    args = parser.parse_args()
    with temp_dir("tbhub-bench-health-cpu.") as work:
        log(f"registering {args.runs_active} runs ...")
        settings, files = install(work, args.runs_active)
        factory = make_session_factory(make_engine(settings.db_url))
        monitor = HealthMonitor(settings, factory, ScalarCache(settings.storage))
        # As `tbhub serve` does before its duties start: what start-up made (modules, the
        # reader's protos) is frozen out of the collector's sight.
        load_reader()
        gc.collect()
        gc.freeze()
        if args.feed == "passes":
            samples = measure_passes(monitor, files, args)
            report(args, samples, monitor, factory)
            return
        before = set(threading.enumerate())
        feeder = start_feed(args.feed, settings, factory, monitor, files)
        watcher_threads = [t for t in threading.enumerate() if t not in before]
        monitor.start()
        assert monitor._thread is not None
        monitor_threads = [monitor._thread]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, json.dumps([str(f) for f in files])],
            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )  # fmt: skip
        samples: list[Sample] = []
        try:
            log(f"writing {args.runs_active} runs x {SCALARS_PER_SECOND} scalars/s; "
                f"settling {args.settle:.0f}s ...")  # fmt: skip
            time.sleep(args.settle)
            for index in range(1, args.runs + 1):
                cpu_m, cpu_w = thread_cpu(monitor_threads), thread_cpu(watcher_threads)
                cpu_p, wall = time.process_time(), time.monotonic()
                read, passes = monitor.stats.bytes_read, monitor.stats.passes
                written = sum(f.stat().st_size for f in files)
                time.sleep(args.window)
                seconds = time.monotonic() - wall
                written = sum(f.stat().st_size for f in files) - written
                sample = Sample(
                    index, seconds,
                    100 * (thread_cpu(monitor_threads) - cpu_m) / seconds,
                    100 * (thread_cpu(watcher_threads) - cpu_w) / seconds,
                    100 * (time.process_time() - cpu_p) / seconds,
                    monitor.stats.bytes_read - read, written, monitor.stats.passes - passes,
                )  # fmt: skip
                samples.append(sample)
                log(f"window {index}/{args.runs}: monitor {sample.monitor_percent:.2f}% of a "
                    f"core, watcher {sample.watcher_percent:.2f}%, process "
                    f"{sample.process_percent:.2f}%; {written / seconds / 1024:.0f} KiB/s "
                    f"written, {sample.bytes_read / seconds / 1024:.0f} KiB/s read in "
                    f"{sample.passes} passes")  # fmt: skip
            if writer.poll() is not None:
                raise RuntimeError("the writer stopped")
        finally:
            writer.terminate()
            writer.wait(10)
            monitor.stop()
            feeder.stop()
        report(args, samples, monitor, factory)


def report(args: argparse.Namespace, samples: list[Sample], monitor: HealthMonitor,
           factory: sessionmaker[Session]) -> None:  # fmt: skip
    with factory() as session:
        running = session.query(Run).filter(Run.status == "running").count()
        raised = session.query(Incident).count()
    # Every run was read: the monitor heard of each file and followed it.
    assert monitor.followed() >= args.runs_active * 0.99, monitor.followed()
    figure = median([s.monitor_percent for s in samples])
    kept_up = sum(s.bytes_read for s in samples) / max(1, sum(s.bytes_written for s in samples))
    whole = figure / max(kept_up, 1e-9)  # at the same CPU per byte, reading all that came
    feed = median([s.watcher_percent for s in samples])
    process = median([s.process_percent for s in samples])
    unit = " passes" if args.feed == "passes" else "s"
    summary = (f"health monitor with {args.runs_active} runs x {SCALARS_PER_SECOND} scalars/s, "
               f"fed by the {args.feed} feed: {figure:.2f}% of a core (median of {args.runs} "
               f"windows of {args.window:.0f}{unit}; feed {feed:.2f}%, "
               f"whole process {process:.2f}%); "
               f"it read {kept_up:.0%} of what was written (all of it: about {whole:.0f}% at "
               f"this CPU per byte); {raised} incidents on healthy curves; "
               f"target <= {TARGET_PERCENT:g}%")  # fmt: skip
    if args.json:
        emit_report("health_monitor_cpu", data={"runs": args.runs_active, "running": running,
                                                "scalars_per_second": SCALARS_PER_SECOND,
                                                "feed": args.feed},
                    samples=samples, n=args.runs, summary=summary,
                    median_percent=figure, incidents=raised, read_share=kept_up,
                    percent_reading_all=whole,
                    target_percent=TARGET_PERCENT)  # fmt: skip
    else:
        print(summary)


if __name__ == "__main__":
    main()
