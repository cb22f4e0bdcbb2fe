"""The instruments tbhub's processes count and time with (prometheus-client), and the one
exposition /metrics serves.

Values are kept per process. `tbhub serve` turns on prometheus-client's multiprocess mode
(`use_directory`) before anything counts: every process it starts then writes its values
to a memory-mapped file in one directory, and a scrape answered by any of them sums them
(gauges say how: `livemax`, the largest among the processes alive). A process adds its
increments up in memory and writes them to its file once a second (`FLUSH_SECONDS`), when
it answers a scrape and when it exits: a locked file write on every count cost the auth
hook about 30 microseconds a request. Another process's counts reach a scrape within the
second; a gauge's `set` is written at once. Without it (tests,
one-off commands) the values live in this process's memory. Figures read from the database
at scrape time (boards, backups, trash, incidents) are not instruments: they come from the
collector the route passes to `exposition`, the same whichever process answers.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Request latency: the auth hook answers in about a millisecond, a page in tens.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
START_BUCKETS = (0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120)
RECONCILE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


@dataclass(frozen=True)
class Instruments:
    """Every counter, gauge and histogram tbhub's own code updates."""

    request_seconds: Histogram
    cache_lookups: Counter
    board_starts: Counter
    board_swaps: Counter
    board_start_seconds: Histogram
    reconcile_seconds: Histogram
    leader: Gauge
    leader_changes: Counter
    health_passes: Counter
    health_pass_seconds: Counter
    health_read_bytes: Counter
    health_runs_behind: Gauge
    health_runs_followed: Gauge
    health_lag: Gauge
    watcher_lag: Gauge


def _build(registry: CollectorRegistry) -> Instruments:
    # A `_created` series beside every counter and histogram doubles the scrape for a
    # timestamp no rule or panel here reads.
    disable_created_metrics()

    def gauge(name: str, text: str) -> Gauge:
        # livemax: the value of the process that has it (the leader's duties run in one).
        return Gauge(name, text, registry=registry, multiprocess_mode="livemax")

    return Instruments(
        request_seconds=Histogram(
            "tbhub_http_request_duration_seconds",
            "Control-plane request latency by route template (the auth hook included).",
            ["method", "route"], buckets=REQUEST_BUCKETS, registry=registry),
        cache_lookups=Counter(
            "tbhub_auth_cache_lookups",
            "Lookups in the auth hook's caches (access, token, share_link, compare, "
            "restriction) by result: hit or miss.", ["cache", "result"], registry=registry),
        board_starts=Counter(
            "tbhub_board_starts", "Boards started, by reason (new: not a replacement).",
            ["reason"], registry=registry),
        board_swaps=Counter(
            "tbhub_board_swaps",
            "Times a project's upstream moved from a board to its replacement.",
            registry=registry),
        board_start_seconds=Histogram(
            "tbhub_board_start_seconds", "Seconds from a board's start to its first ready probe.",
            buckets=START_BUCKETS, registry=registry),
        reconcile_seconds=Histogram(
            "tbhub_reconcile_pass_seconds", "Wall time of one supervisor reconcile pass.",
            buckets=RECONCILE_BUCKETS, registry=registry),
        leader=gauge("tbhub_supervisor_leader",
                     "1 if this replica runs the supervisor and the jobs, 0 on a standby."),
        leader_changes=Counter(
            "tbhub_supervisor_leader_changes",
            "Times this replica became the leader or stopped being it.", registry=registry),
        health_passes=Counter("tbhub_health_passes", "Monitor passes run.", registry=registry),
        health_pass_seconds=Counter(
            "tbhub_health_pass_seconds", "Wall time spent in monitor passes.", registry=registry),
        health_read_bytes=Counter(
            "tbhub_health_read_bytes", "Event-file bytes the monitor read.", registry=registry),
        health_runs_behind=gauge(
            "tbhub_health_runs_behind",
            "Runs with data the monitor has not read yet (its byte budget ran out)."),
        health_runs_followed=gauge("tbhub_health_runs_followed",
                                   "Runs the monitor keeps state for."),
        health_lag=gauge(
            "tbhub_health_lag_seconds",
            "How long the oldest change the run-health monitor has not read yet has waited."),
        watcher_lag=gauge(
            "tbhub_watcher_lag_seconds",
            "Seconds from an event file's change to the storage watcher recording it "
            "(the last change recorded)."),
    )  # fmt: skip


_lock = threading.Lock()
_registry = CollectorRegistry(auto_describe=True)
_instruments: Instruments | None = None


def instruments() -> Instruments:
    """The process's instruments, made on first use (after `use_directory`, if at all)."""
    global _instruments
    if _instruments is None:
        with _lock:
            if _instruments is None:
                _instruments = _build(_registry)
    return _instruments


FLUSH_SECONDS = 1.0


class _Buffer:
    """The buffered values of this process and the thread that writes them to their files."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one for all: an increment holds it for an add
        self.values: list[Any] = []
        self.thread: threading.Thread | None = None

    def add(self, value: Any) -> None:
        with self.lock:
            self.values.append(value)
        self._start()

    def flush(self) -> None:
        """Every pending increment written to its file (under the lock, so a gauge's `set`
        never lands between a flush's read and its write)."""
        with self.lock:
            for value in self.values:
                if value.pending:
                    value.written.inc(value.pending)
                    value.pending = 0.0

    def forked(self) -> None:
        """In a child of fork: the counts still pending are the parent's to write."""
        self.lock = threading.Lock()
        for value in self.values:
            value.pending = 0.0
        self.thread = None
        if self.values:
            self._start()

    def _start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="tbhub-metrics", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()


_buffer = _Buffer()
atexit.register(_buffer.flush)
os.register_at_fork(after_in_child=_buffer.forked)


def _buffered(file_value: type) -> type:
    """prometheus-client's value class for multiprocess mode, its increments added up in
    memory (`_Buffer` writes them)."""

    class BufferedValue:
        _multiprocess = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.written = file_value(*args, **kwargs)
            self.pending = 0.0
            _buffer.add(self)

        def inc(self, amount: float) -> None:
            with _buffer.lock:
                self.pending += amount

        def set(self, value: float, timestamp: float | None = None) -> None:
            with _buffer.lock:
                self.pending = 0.0
                self.written.set(value, timestamp)

        def get(self) -> float:
            with _buffer.lock:
                return float(self.written.get()) + self.pending

        def set_exemplar(self, _exemplar: object) -> None:
            return None  # multiprocess mode keeps no exemplars

        def get_exemplar(self) -> None:
            return None

    return BufferedValue


def use_directory(directory: Path, *, fresh: bool = True) -> None:
    """Multiprocess mode: this process and every process it starts afterwards (they inherit
    the environment) keep their values in `directory`. Call it before anything counts; the
    files of earlier runs are removed, as prometheus-client asks (`fresh`; not by a process
    that joins a running server: an API worker)."""
    if _instruments is not None:
        raise RuntimeError("metrics were counted before multiprocess mode was turned on")
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db") if fresh else ():
        stale.unlink()
    os.environ[MULTIPROCESS_ENV] = str(directory)
    # prometheus-client picks its value class when imported; pick again now that the
    # directory is known (its own tests switch the same way).
    values.ValueClass = _buffered(values.get_value_class())


class _Idle:
    """An instrument that counts nothing (TBHUB_METRICS_ENABLED=false)."""

    def labels(self, *_values: str) -> _Idle:
        return self

    def inc(self, _amount: float = 1.0) -> None:
        pass

    def set(self, _value: float) -> None:
        pass

    def observe(self, _value: float) -> None:
        pass


def turn_off() -> None:
    """Nothing counts in this process: /metrics shows its families at zero."""
    global _instruments
    if _instruments is not None:
        raise RuntimeError("metrics were counted before they were turned off")
    idle: Any = _Idle()
    _instruments = Instruments(*[idle] * len(fields(Instruments)))


def forget_process(pid: int) -> None:
    """A process of this server ended: its live gauges stop counting (counters stay)."""
    if (directory := os.environ.get(MULTIPROCESS_ENV)) is not None:
        mark_process_dead(pid, directory)


class _Joined(Collector):
    """The instruments of every process, then the scrape-time families."""

    def __init__(self, extra: Iterable[Collector]) -> None:
        self._extra = list(extra)

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        directory = os.environ.get(MULTIPROCESS_ENV)
        if directory is not None:
            yield from MultiProcessCollector(None, path=directory).collect()
        else:
            yield from _registry.collect()
        for collector in self._extra:
            yield from collector.collect()


def exposition(*extra: Collector) -> bytes:
    """The text a scrape gets: every process's instruments and the `extra` collectors."""
    instruments()  # the families are listed (at zero) before anything counted
    _buffer.flush()  # this process's own counts, up to the moment
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Joined(extra))
    return generate_latest(registry)
