"""A run's scalar curves, for sparklines, read through the one incremental event-file reader
(storage/event_reader.py): each run's files are read on from where the last read stopped, at
most `budget` bytes per call, so a page of sparklines costs bounded work however large the
runs are.

Per run at most `MAX_SERIES` curves of at most `2 * MAX_POINTS` points are kept: a curve
that grows past that drops every other point, which keeps its shape. Values that are not
finite are left out of the curves (health/ reports them).

On the leader the run-health monitor reads through this cache too (`refresh`): every new
point reaches the sparklines and the `listener` in the same read, so a record is parsed once
however many want it. A run dropped from the cache (it holds the `max_runs` runs read most
recently) starts over from the start of its files when it is read again; the listener gets
that reading with `reset` set.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tbhub.storage.event_reader import Reading, RunFollower, load_reader

__all__ = ["MAX_POINTS", "ScalarCache", "load_reader", "pick_curve"]

MAX_POINTS = 256
MAX_SERIES = 32
Point = tuple[int, float]
# Hears every reading of every run: (project, run path, reading), under the run's lock.
Listener = Callable[[str, str, Reading], None]


@dataclass
class _Run:
    follower: RunFollower
    series: dict[str, list[Point]] = field(default_factory=dict)  # curve name -> points
    lock: threading.Lock = field(default_factory=threading.Lock)


def _thin(points: list[Point]) -> list[Point]:
    """Every other point, always keeping the newest."""
    kept = points[::2]
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def _add(run: _Run, reading: Reading) -> None:
    if reading.reset:
        run.series.clear()
    series, isfinite, most = run.series, math.isfinite, 2 * MAX_POINTS
    for tag, step, _, value in reading.scalars:
        if not isfinite(value):
            continue
        points = series.get(tag)
        if points is None:
            if len(series) >= MAX_SERIES:
                continue
            points = series[tag] = []
        points.append((step, value))
        if len(points) > most:
            series[tag] = _thin(points)


class ScalarCache:
    """Per run (project, path): its follower and curves, for the newest `max_runs` runs read."""

    def __init__(
        self,
        storage_root: Path,
        *,
        max_runs: int = 2048,
        budget: int = 4 << 20,
        listener: Listener | None = None,
    ) -> None:
        self.storage_root = storage_root
        self.max_runs = max_runs
        self.budget = budget
        self.listener = listener
        self._runs: OrderedDict[tuple[str, str], _Run] = OrderedDict()
        self._lock = threading.Lock()

    def _entry(self, key: tuple[str, str]) -> _Run:
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = _Run(RunFollower(self.storage_root, *key))
            self._runs.move_to_end(key)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
            return run

    def refresh(
        self,
        project: str,
        run_path: str,
        *,
        budget: int | None = None,
        histograms: bool = False,
        project_fd: int | None = None,
    ) -> Reading:
        """Read what the run's event files gained (up to `budget` bytes, the cache's by
        default) into its curves and hand it to the listener; what was read. `project_fd`:
        the project's directory opened once for many runs (RunFollower.read)."""
        run = self._entry((project, run_path))
        with run.lock:
            return self._read(run, project, run_path, budget, histograms, project_fd)

    def _read(
        self,
        run: _Run,
        project: str,
        run_path: str,
        budget: int | None,
        histograms: bool,
        project_fd: int | None = None,
    ) -> Reading:
        if histograms:  # a rule asks for them: from here on (what was read stays read)
            run.follower.histograms = True
        budget = self.budget if budget is None else budget
        reading = run.follower.read(budget, project_fd=project_fd)
        _add(run, reading)
        if self.listener is not None and (
            reading.scalars or reading.histograms or reading.reset or reading.params is not None
        ):
            self.listener(project, run_path, reading)
        return reading

    def forget(self, project: str, run_path: str) -> None:
        with self._lock:
            self._runs.pop((project, run_path), None)

    def curves(self, project: str, run_path: str) -> dict[str, list[Point]]:
        """The run's scalar curves (name -> (step, value) points), after reading what its
        event files gained since the last call, up to the byte budget."""
        run = self._entry((project, run_path))
        with run.lock:
            self._read(run, project, run_path, None, False)
            return {name: list(points) for name, points in run.series.items()}


def pick_curve(curves: dict[str, list[Point]]) -> str | None:
    """The curve a sparkline shows: `loss`, else a curve named loss under some prefix
    (train/loss), else any curve with loss in its name (training ones first), else the first."""
    names = [name for name, points in curves.items() if points]
    if not names:
        return None
    lowered = {name: name.lower() for name in names}
    for wanted in (
        lambda n: lowered[n] == "loss",
        lambda n: lowered[n].rsplit("/", 1)[-1] == "loss" and "train" in lowered[n],
        lambda n: lowered[n].rsplit("/", 1)[-1] == "loss",
        lambda n: "loss" in lowered[n] and "train" in lowered[n],
        lambda n: "loss" in lowered[n],
    ):
        chosen = [n for n in names if wanted(n)]
        if chosen:
            return chosen[0]
    return names[0]
