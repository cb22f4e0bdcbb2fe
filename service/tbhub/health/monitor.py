"""The run-health monitor: on the leader, it follows the event files of the runs that change
and raises incidents (health/incidents.py) from what the detectors see.

Cost stays bounded however many runs there are. The storage watcher hands over each event
file it heard about (`event_files`); only the runs those belong to are read, through the
sparklines' cache (storage/scalars.py: the same follower, so each record is parsed once),
at most `health_pass_bytes` per pass; a run left behind goes on next pass. There is no
rescan: at start only the runs that are running or wrote lately are read, from the start of
their files (detectors need the recent past; incidents already recorded are not repeated).

Every `runs_every` seconds a pass also looks at the runs table (health/run_table.py):
crashed, finished and stalled runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import TbhubError
from tbhub.core.models import (
    Project,
    RetentionState,
    Run,
    RunStatus,
)
from tbhub.core.settings import Settings
from tbhub.domain.run_params import set_logged
from tbhub.health import incidents
from tbhub.health.detectors import Detection, RunDetectors
from tbhub.health.rules import RuleSet, effective_rules
from tbhub.health.run_table import RunTable
from tbhub.storage.event_reader import Reading
from tbhub.storage.paths import open_project
from tbhub.storage.scalars import ScalarCache

log = logging.getLogger("tbhub.health")

RULES_SECONDS = 10.0  # an owner's change to the rules applies within this
RUNS_EVERY = 5.0  # seconds between two looks at the runs table (status changes, stalls)
SEED_HOURS = 1.0  # at start: runs that wrote within this long are read
IN_BATCH = 500  # paths per IN (...) query
# Between two passes the monitor rests REST_RATIO times as long as the last pass took, at
# most MAX_REST seconds, unless it is behind. Most of a pass over runs that wrote a little is
# the same few system calls per run whatever it reads, so reading 1,000 runs every 0.6 s (as
# often as the watcher flushes) cost a third more than reading them every second. A pass
# over a few runs takes a millisecond or so, and rests about as little: only a big
# installation pays in detection latency, at most MAX_REST (the target is 2 s).
REST_RATIO = 12.0
MAX_REST = 1.0


@dataclass
class _Watched:
    run_id: int
    project_id: int
    detectors: RunDetectors | None = None


@dataclass
class MonitorStats:
    passes: int = 0
    pass_seconds: float = 0.0
    bytes_read: int = 0
    incidents: int = 0


@dataclass
class _Rules:
    ruleset: RuleSet
    loaded: float


@dataclass
class HealthMonitor:
    settings: Settings
    factory: sessionmaker[Session]
    scalars: ScalarCache
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    runs_every: float = RUNS_EVERY  # seconds between two looks at the runs table
    stats: MonitorStats = field(default_factory=MonitorStats)

    def __post_init__(self) -> None:
        self._files: set[tuple[str, str]] = set()  # (project, event file path) heard about
        self._pending: OrderedDict[tuple[str, str], None] = OrderedDict()  # runs to read
        self._readings: deque[tuple[str, str, Reading]] = deque()
        # Run id -> the hyperparameters and metrics its training code wrote, to keep.
        self._logged: dict[int, tuple[dict[str, Any], dict[str, float]]] = {}
        self._watched: OrderedDict[tuple[str, str], _Watched] = OrderedDict()
        self._rules: dict[int, _Rules] = {}
        self._run_table = RunTable(self.settings, self.rules)
        self._runs_checked = 0.0
        self._lock = threading.Lock()
        self._behind_since: float | None = None  # first change heard since caught up
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.scalars.max_runs = max(self.scalars.max_runs, self.settings.health_max_runs)
        self.scalars.listener = self._heard

    # -- what others tell us ----------------------------------------------------------------

    def event_files(self, files: Iterable[tuple[str, str]]) -> None:
        """The watcher's hook: these event files (project, path in it) changed."""
        with self._lock:
            if self._behind_since is None:
                self._behind_since = time.monotonic()
            self._files.update(files)
        self._wake.set()

    def _heard(self, project: str, run_path: str, reading: Reading) -> None:
        """The scalar cache's listener: every reading, whoever asked for it."""
        with self._lock:
            self._readings.append((project, run_path, reading))

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tbhub-health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.scalars.listener == self._heard:
            self.scalars.listener = None

    def _run(self) -> None:
        try:
            self.seed()
        except Exception:
            log.exception("health monitor: could not list the active runs; going on")
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_pass()
            except Exception:
                log.exception("health monitor pass failed; retrying")
            ended = time.monotonic()
            with self._lock:
                busy = bool(self._pending or self._files)
                if not busy:
                    self._behind_since = None  # caught up: the lag is zero again
            if not busy:
                self._wake.wait(self.settings.health_interval)
                rest = min(MAX_REST, REST_RATIO * (ended - started))
                self._stop.wait(max(0.0, rest - (time.monotonic() - ended)))
            self._wake.clear()

    def seed(self) -> int:
        """Mark the runs that are running or wrote lately to be read; how many."""
        since = self.clock() - timedelta(hours=SEED_HOURS)
        query = (
            select(Project.name, Run.path)
            .join(Project, Project.id == Run.project_id)
            .where(Run.retention_state == RetentionState.present)
            .where(or_(Run.status == RunStatus.running, Run.last_write >= since))
            .order_by(Run.last_write.desc())
            .limit(self.settings.health_max_runs)
        )
        with self.factory() as session:
            keys = [(name, path) for name, path in session.execute(query)]
        with self._lock:
            self._pending.update((key, None) for key in keys)
        return len(keys)

    # -- one pass ---------------------------------------------------------------------------

    def run_pass(self) -> int:
        """Read what changed (within the byte budget), detect, record; new incidents."""
        started = time.monotonic()
        with self._lock:
            files, self._files = self._files, set()
        if files:
            self._resolve(files)
        found: list[tuple[_Watched, Detection]] = []
        self._read_pending(found)
        found += self._detect()
        now = self.clock()
        raised = 0
        look_at_runs = time.monotonic() - self._runs_checked >= self.runs_every
        logged, self._logged = self._logged, {}
        if found or look_at_runs or logged:  # most passes find nothing: no transaction
            with transaction(self.factory) as session:
                raised += self._record(session, found, now)
                self._keep_logged(session, logged)
                if look_at_runs:
                    self._runs_checked = time.monotonic()
                    raised += self._run_table.look(session, now)
        self.stats.passes += 1
        self.stats.pass_seconds += time.monotonic() - started
        self.stats.incidents += raised
        return raised

    def _read_pending(self, found: list[tuple[_Watched, Detection]]) -> None:
        """Read the runs that changed, oldest news first, within the pass's byte budget; each
        project's directory is opened (and checked, storage/paths.py) once for all its runs.
        Each run's reading goes to the detectors (into `found`) as soon as it is read: a
        reading kept to the end of the pass would outlive the collector's young generations
        and make it walk the whole heap far more often (a third of the pass's time, 1,000 runs)."""
        budget = self.settings.health_pass_bytes
        with self._lock:
            keys = list(self._pending)
        by_project: dict[str, list[str]] = {}
        for project, run_path in keys:
            by_project.setdefault(project, []).append(run_path)
        for project, run_paths in by_project.items():
            if budget <= 0:
                return
            try:
                project_fd = open_project(self.settings.storage, project)
            except (OSError, TbhubError):  # gone, or no longer a project directory to read
                with self._lock:
                    for run_path in run_paths:
                        self._pending.pop((project, run_path), None)
                continue
            try:
                for run_path in run_paths:
                    if budget <= 0:
                        return
                    budget -= self._read_run((project, run_path), budget, project_fd)
                    if self._readings:
                        found += self._detect()
            finally:
                os.close(project_fd)

    def _read_run(self, key: tuple[str, str], budget: int, project_fd: int) -> int:
        rules = self._rules_for_key(key)
        histograms = rules is not None and rules.on("nan") and rules["nan"].histograms
        reading = self.scalars.refresh(*key, budget=budget, histograms=histograms,
                                       project_fd=project_fd)  # fmt: skip
        self.stats.bytes_read += reading.bytes_read
        if not reading.behind:
            with self._lock:
                self._pending.pop(key, None)
        return reading.bytes_read

    def check_runs_now(self) -> None:
        """Look at the runs table on the next pass (tests, and a status change the API made)."""
        self._runs_checked = 0.0
        self._wake.set()

    def _resolve(self, files: set[tuple[str, str]]) -> None:
        """The runs the changed files belong to: the outermost run at or above each file.
        Runs already followed are known; the runs table is asked about the others only."""
        found: set[tuple[str, str]] = set()
        unknown: dict[str, dict[str, list[str]]] = {}  # project -> file -> its ancestors
        watched = self._watched
        for project, path in files:
            parts = path.split("/")[:-1]
            ancestor = parts[0] if parts else ""
            for depth in range(1, len(parts) + 1):  # the outermost first
                if depth > 1:
                    ancestor += "/" + parts[depth - 1]
                if (project, ancestor) in watched:
                    found.add((project, ancestor))
                    break
            else:
                ancestors = ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
                unknown.setdefault(project, {})[path] = ancestors
        if unknown:
            with self.factory() as session:
                for project, by_file in unknown.items():
                    candidates = sorted({a for ancestors in by_file.values() for a in ancestors})
                    paths: set[str] = set()
                    for first in range(0, len(candidates), IN_BATCH):
                        query = (
                            select(Run.path)
                            .join(Project, Project.id == Run.project_id)
                            .where(Project.name == project)
                            .where(Run.path.in_(candidates[first : first + IN_BATCH]))
                        )
                        paths.update(session.scalars(query))
                    for ancestors in by_file.values():
                        owner = next((a for a in ancestors if a in paths), None)
                        if owner is not None:
                            found.add((project, owner))
        with self._lock:
            self._pending.update((key, None) for key in found)

    # -- rules ------------------------------------------------------------------------------

    def _watched_for(self, session: Session | None, key: tuple[str, str]) -> _Watched | None:
        watched = self._watched.get(key)
        if watched is not None:
            self._watched.move_to_end(key)
            return watched
        query = (
            select(Run.id, Run.project_id)
            .join(Project, Project.id == Run.project_id)
            .where(Project.name == key[0], Run.path == key[1])
        )
        if session is None:
            with self.factory() as own:
                row = own.execute(query).first()
        else:
            row = session.execute(query).first()
        if row is None:
            return None
        watched = self._watched[key] = _Watched(run_id=row[0], project_id=row[1])
        while len(self._watched) > self.settings.health_max_runs:
            self._watched.popitem(last=False)
        return watched

    def _rules_for_key(self, key: tuple[str, str]) -> RuleSet | None:
        watched = self._watched_for(None, key)
        return None if watched is None else self.rules(watched.project_id)

    def rules(self, project_id: int, session: Session | None = None) -> RuleSet:
        cached = self._rules.get(project_id)
        if cached is not None and time.monotonic() - cached.loaded < RULES_SECONDS:
            return cached.ruleset
        minutes = self.settings.run_stalled_minutes
        if session is None:
            with self.factory() as own:
                ruleset = effective_rules(own, project_id=project_id, stalled_minutes=minutes)
        else:
            ruleset = effective_rules(session, project_id=project_id, stalled_minutes=minutes)
        self._rules[project_id] = _Rules(ruleset, time.monotonic())
        return ruleset

    # -- curves -----------------------------------------------------------------------------

    def _detect(self) -> list[tuple[_Watched, Detection]]:
        with self._lock:
            readings, self._readings = self._readings, deque()
        found: list[tuple[_Watched, Detection]] = []
        for project, run_path, reading in readings:
            watched = self._watched_for(None, (project, run_path))
            if watched is None:
                continue  # a directory with no run row (yet): nothing to raise on
            rules = self.rules(watched.project_id)
            detectors = watched.detectors
            if detectors is not None and detectors.rules is not rules:
                if detectors.rules != rules:  # an owner changed them (reloaded, not the same)
                    detectors = None
                else:
                    detectors.rules = rules
            if reading.reset or detectors is None:
                detectors = watched.detectors = RunDetectors(rules)
            if reading.params is not None:
                self._logged[watched.run_id] = reading.params
            hits = detectors.feed(reading.scalars)
            if reading.histograms:
                hits += detectors.feed_histograms(reading.histograms)
            if hits:
                found.extend((watched, d) for d in hits)
        return found

    def _record(
        self, session: Session, found: list[tuple[_Watched, Detection]], now: datetime
    ) -> int:
        by_run: dict[int, list[Detection]] = {}
        for watched, detection in found:
            by_run.setdefault(watched.run_id, []).append(detection)
        raised = 0
        for run_id, detections in by_run.items():
            run = session.get(Run, run_id)
            if run is not None:
                new = incidents.record_all(session, run=run, detections=detections, now=now)
                raised += len(new)
        return raised

    def _keep_logged(
        self, session: Session, logged: dict[int, tuple[dict[str, Any], dict[str, float]]]
    ) -> None:
        """What the training code of these runs wrote of hyperparameters and metrics
        (storage/logged_params.py), kept on each run and in its searchable rows."""
        for run_id, (hparams, metrics) in logged.items():
            run = session.get(Run, run_id)
            if run is not None:
                set_logged(session, run, hparams, metrics)

    # -- /metrics ---------------------------------------------------------------------------

    def followed(self) -> int:
        """Runs the monitor keeps detector state for."""
        return len(self._watched)

    def behind(self) -> int:
        """Runs with data not read yet (changed files not looked at count too)."""
        with self._lock:
            return len(self._pending) + len(self._files)

    def lag(self) -> float:
        """Seconds the oldest change heard about and not read yet has waited (0: none)."""
        with self._lock:
            since = self._behind_since if (self._pending or self._files) else None
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def metric_lines(self) -> list[tuple[str, float]]:
        """The monitor's figures for /metrics (supervisor/metrics.py publishes them)."""
        stats = self.stats
        return [
            ("passes", stats.passes),
            ("pass_seconds", round(stats.pass_seconds, 6)),
            ("read_bytes", stats.bytes_read),
            ("runs_behind", self.behind()),
            ("runs_followed", len(self._watched)),
            ("lag_seconds", self.lag()),
        ]
