"""The storage watcher: a directory that gets event files (or profiler traces, storage/scan.py)
becomes a run in the registry, and every run's size and last write stay current (DESIGN.md
decision 9).

watchdog's inotify observer watches local disks. On NFS/CIFS/FUSE, where inotify misses what
other clients write, its polling observer walks the tree every `watch_poll_interval` seconds
with `lstat`, so a symlink (out of the project, say) is never walked into; neither looks into
the compare boards' views (domain/observers.py). Either way an event only marks a directory
dirty. A flush thread then re-measures each dirty run, or each new subtree, with the walk
retention uses (jobs/scan.py), so a change costs one run's walk and never the whole tree's.
The results go to a sink (the runs table); the watcher keeps the last state it reported per
project. Every change also calls `on_change`, the job runner's hook for change-triggered
backups.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Container
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from tbhub.core.errors import StorageUnavailable
from tbhub.core.fstype import network_mounts_below
from tbhub.core.metrics import instruments
from tbhub.core.names import PROJECT_SLUG
from tbhub.domain.observers import Unwatched, WatchMode, make_observer
from tbhub.storage.event_health import FramingWatch, Healer
from tbhub.storage.paths import project_problem
from tbhub.storage.reach import within
from tbhub.storage.scan import (
    EVENT_FILE_PREFIX,
    NONE_CLAIMED,
    Claimed,
    RunInfo,
    is_trace,
    profile_owner,
    scan_projects,
    scan_under,
)

log = logging.getLogger("tbhub.watcher")

# Only changes. Without this filter inotify also reports every open and close of a directory,
# and each walk (ours, or watchdog re-adding watches) floods its queue with them.
CHANGE_EVENTS = [
    FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
    DirCreatedEvent, DirDeletedEvent, DirMovedEvent,
]  # fmt: skip
QUIET_EVENTS = frozenset({"opened", "closed", "closed_no_write"})


@dataclass
class ProjectChanges:
    """What the sink hears about one project: runs new or changed, and runs gone from disk."""

    project: str
    runs: list[RunInfo] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)


class RunSink(Protocol):
    def record(self, changes: list[ProjectChanges]) -> None:
        """Store the changes; raise to have them offered again at the next flush."""


class RunIndex:
    """The runs of each project as last reported to the sink, by path."""

    def __init__(self) -> None:
        self._runs: dict[str, dict[str, RunInfo]] = {}
        self._bytes: dict[str, int] = {}
        self._lock = threading.Lock()

    def owner(self, project: str, rel: str) -> str | None:
        """The known run at `rel` or above it (a run owns everything under it)."""
        with self._lock:
            return owner_at_or_above(self._runs.get(project, {}), rel)

    def diff(self, project: str, rel: str, found: list[RunInfo]) -> ProjectChanges:
        """How `found` (every run at or under `rel` now) differs from what is known."""
        return self.diff_many(project, [(rel, found)])

    def diff_many(self, project: str, measured: list[tuple[str, list[RunInfo]]]) -> ProjectChanges:
        """The same for several paths of one project at once, none under another: the known
        runs are gone through once (a flush of 1,000 runs that wrote went through all of
        them for each, a million comparisons a second)."""
        rels = {rel for rel, _ in measured}
        found = [run for _, runs in measured for run in runs]
        with self._lock:
            runs = self._runs.get(project, {})
            if "" in rels:
                known = list(runs)
            else:
                known = [p for p in runs if owner_at_or_above(rels, p) is not None]
            changed = [run for run in found if runs.get(run.path) != run]
        now = {run.path for run in found}
        return ProjectChanges(
            project, runs=changed, gone=[path for path in known if path not in now]
        )

    def apply(self, changes: ProjectChanges) -> None:
        with self._lock:
            runs = self._runs.setdefault(changes.project, {})
            total = self._bytes.get(changes.project, 0)
            for path in changes.gone:
                old = runs.pop(path, None)
                total -= old.bytes if old else 0
            for run in changes.runs:
                old = runs.get(run.path)
                total += run.bytes - (old.bytes if old else 0)
                runs[run.path] = run
            self._bytes[changes.project] = total

    def project_bytes(self, project: str) -> int | None:
        """Bytes of the project's runs, or None before the first scan saw the project."""
        with self._lock:
            return self._bytes.get(project)


class StorageWatcher:
    def __init__(
        self,
        root: Path,
        sink: RunSink,
        *,
        mode: WatchMode,
        poll_interval: float = 10.0,
        on_change: Callable[[], None] = lambda: None,
        claims: Callable[[str], Claimed] = lambda project: NONE_CLAIMED,
        healer: Healer | None = None,
        on_event_files: Callable[[set[tuple[str, str]]], None] | None = None,
        settle: float = 0.1,
        min_gap: float = 0.5,
        retry_after: float = 5.0,
        storage_wait: float = 10.0,
        unwatched: Collection[Path] = (),
    ) -> None:
        self.root = root.resolve()
        self.sink = sink
        self.mode = mode
        self.poll_interval = poll_interval
        self.on_change = on_change
        # Directories under the root that no observer watches: the compare boards' views
        # (domain/observers.py says why).
        self.unwatched = Unwatched.of(unwatched)
        # The project's registered runs: each is a run whatever it holds, and owns its
        # subtree, so event files in its subdirectories never become runs of their own.
        self.claims = claims
        # Event files rewritten in place get their board restarted (storage/event_health.py).
        self.healer = healer
        self.framing = FramingWatch(self.root)
        # Each flush hands the event files it heard about, (project, path in it), to the
        # run-health monitor (health/monitor.py), after the sink has the runs they make.
        self.on_event_files = on_event_files
        self._event_files: set[tuple[str, str]] = set()
        self.settle = settle  # let a burst of events gather before a flush
        self.min_gap = min_gap  # at most one flush (one DB write) per this many seconds
        self.retry_after = retry_after
        # Seconds a flush waits for one project's storage before leaving it for later.
        self.storage_wait = storage_wait
        self.index = RunIndex()
        self._prefix = str(self.root) + os.sep
        self._dirty: set[tuple[str, str, bool]] = set()  # (project, dir, may hold a new run)
        self._dirty_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        # While the first full scan runs, what the flushes measured: measured again after it,
        # so the scan's older view never has the last word (see _first_scan).
        self._during_scan: set[tuple[str, str, bool]] = set()
        self._record_lock = threading.Lock()  # one writer of the sink and the index at a time
        self._scanner: threading.Thread | None = None
        self._observer: BaseObserver | None = None
        self._mount_observer: BaseObserver | None = None  # polls network mounts of projects
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Watch first, then scan: a change made during the first scan is not missed."""
        self._observer = self._start_observer()
        self._thread = threading.Thread(target=self._run, name="tbhub-watcher", daemon=True)
        self._thread.start()

    def _start_observer(self) -> BaseObserver:
        handler = _Handler(self)
        observer = make_observer(self.mode, self.poll_interval, self.unwatched)
        observer.schedule(handler, str(self.root), recursive=True, event_filter=CHANGE_EVENTS)
        try:
            observer.start()
        except OSError as exc:
            if self.mode != "inotify":
                raise
            # Out of inotify watches or instances: polling still finds every run.
            log.warning(
                "inotify cannot watch %s (%s); polling every %gs instead (raise "
                "fs.inotify.max_user_watches to use inotify)", self.root, exc, self.poll_interval
            )  # fmt: skip
            self.mode = "polling"
            observer = make_observer("polling", self.poll_interval, self.unwatched)
            observer.schedule(handler, str(self.root), recursive=True, event_filter=CHANGE_EVENTS)
            observer.start()
        log.info("watching %s for runs (%s)", self.root, self.mode)
        if self.mode == "inotify":
            self._mount_observer = self._poll_network_mounts(handler)
        return observer

    def _poll_network_mounts(self, handler: FileSystemEventHandler) -> BaseObserver | None:
        """Projects mounted from a network filesystem under a local root are polled too:
        inotify hears nothing that another machine writes there. Each has a walker thread
        of its own, so a mount that hangs stops only its own discovery."""
        mounts = network_mounts_below(self.root)
        if not mounts:
            return None
        observer = make_observer("polling", self.poll_interval, self.unwatched)
        for mount in mounts:
            observer.schedule(handler, str(mount), recursive=True, event_filter=CHANGE_EVENTS)
            log.info("polling %s every %gs: a network filesystem", mount, self.poll_interval)
        observer.start()
        return observer

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        for observer in (self._observer, self._mount_observer):
            if observer is not None:
                observer.stop()
                observer.join(timeout)
        for thread in (self._thread, self._scanner):
            if thread is not None:
                thread.join(timeout)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the first full scan has reached the sink."""
        return self._ready.wait(timeout)

    # -- what others tell us ----------------------------------------------------------------

    def project_bytes(self, project: str) -> int | None:
        """The running total of a project's bytes (storage/usage.py asks, with no walk)."""
        return self.index.project_bytes(project)

    def mark_dirty(self, project: str, rel: str) -> None:
        """Something under `<project>/<rel>` changed (an upload says so without waiting for
        the next poll on NFS)."""
        with self._dirty_lock:
            self._dirty.add((project, rel, True))
        self._wake.set()

    def event_path(self, path: str, is_directory: bool) -> bool:
        """Note a changed path; False when it is outside every project."""
        if not path.startswith(self._prefix):
            return False
        parts = path[len(self._prefix) :].split(os.sep)
        if not PROJECT_SLUG.fullmatch(parts[0]):
            return False  # the trash, upload staging or anything else that is no project
        is_event_file = False
        if is_directory:
            rel, may_be_run = "/".join(parts[1:]), True
        elif len(parts) == 2:
            return True  # a file right in the project directory belongs to no run
        else:
            is_event_file = parts[-1].startswith(EVENT_FILE_PREFIX)
            rel, may_be_run = "/".join(parts[1:-1]), is_event_file or is_trace(parts[-1])
        # A profiler session's directory belongs to the run above its plugins/profile/:
        # measuring from there is what finds that run (storage/scan.py).
        rel = profile_owner(rel) or rel
        with self._dirty_lock:
            self._dirty.add((parts[0], rel, may_be_run))
            # Traces make runs, but only event files go to the healer and the monitor.
            if is_event_file and (self.healer or self.on_event_files):
                self._event_files.add((parts[0], "/".join(parts[1:])))
        self._wake.set()
        return True

    # -- the flush thread -------------------------------------------------------------------

    def _run(self) -> None:
        # The first full scan runs beside the flushes, not before them: on a server it walks
        # in spawned worker processes, whose start-up alone can take seconds, and a run
        # written meanwhile would wait for all of it (12.8 s with a 2 s poll interval).
        self._scanner = threading.Thread(
            target=self._first_scan, name="tbhub-watcher-scan", daemon=True
        )
        self._scanner.start()
        while not self._stop.is_set():
            self._wake.wait(self.healer.due() if self.healer is not None else None)
            if self._stop.wait(self.settle):
                break
            self._wake.clear()
            started = time.monotonic()
            try:
                self.flush()
            except Exception:
                log.exception("recording storage changes failed; retrying")
                self._stop.wait(self.retry_after)
                self._wake.set()
                continue
            self._stop.wait(max(0.0, self.min_gap - (time.monotonic() - started)))

    def _first_scan(self) -> None:
        while not self._stop.is_set():
            try:
                self._scan_everything()
                break
            except Exception:
                log.exception("first scan of %s failed; trying again", self.root)
                self._stop.wait(self.retry_after)
        with self._dirty_lock:
            self._dirty |= self._during_scan
            self._during_scan = set()
            self._ready.set()
        self._wake.set()

    def _scan_everything(self) -> None:
        with os.scandir(self.root) as entries:
            names = [e.name for e in entries if PROJECT_SLUG.fullmatch(e.name)]
        later: set[tuple[str, str, bool]] = set()  # on a mount that does not answer now
        projects = []
        for name in names:
            try:
                if within(f"watcher:{name}", partial(self._is_project, name),
                          timeout=self.storage_wait, max_waiting=1):  # fmt: skip
                    projects.append(name)
            except StorageUnavailable:
                later.add((name, "", True))
        scanned = scan_projects(
            [(str(self.root / name), name, self.claims(name)) for name in projects]
        )
        later |= {(name, "", True) for name, runs in zip(projects, scanned, strict=True)
                  if runs is None}  # fmt: skip
        if later:
            log.warning("storage of %s not answering; scanned once it does",
                        ", ".join(sorted(name for name, _, _ in later)))  # fmt: skip
            with self._dirty_lock:
                self._during_scan |= later
        with self._record_lock:
            changes = [
                self.index.diff(name, "", runs)
                for name, runs in zip(projects, scanned, strict=True)
                if runs is not None
            ]
            self.sink.record(changes)
            for change in changes:
                self.index.apply(change)

    def _is_project(self, name: str) -> bool:
        """A project directory by storage/paths.py's one rule: a directory that is a symlink
        to another project, or a mount, is never walked (its board is refused too)."""
        if not PROJECT_SLUG.fullmatch(name):
            return False
        problem = project_problem(self.root, name)
        if problem is not None:
            log.warning("not watching %s: %s", name, problem)
        return problem is None and (self.root / name).is_dir()

    def flush(self) -> list[ProjectChanges]:
        """Re-measure what is dirty and hand the differences to the sink."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
            if not self._ready.is_set():
                self._during_scan |= dirty
            event_files, self._event_files = self._event_files, set()
        self._heal(event_files)
        by_project: dict[str, list[tuple[str, bool]]] = {}
        for project, rel, may_be_run in dirty:
            by_project.setdefault(project, []).append((rel, may_be_run))
        measured: dict[str, list[tuple[str, list[RunInfo]]]] = {}
        for project, marks in by_project.items():
            try:
                found = within(f"watcher:{project}", partial(self._measure, project, marks),
                               timeout=self.storage_wait, max_waiting=1)  # fmt: skip
            except StorageUnavailable:
                # A hung or dropped mount: nothing is concluded (no run is gone); measured
                # again at a later flush, while the other projects go on.
                log.warning("project %s's storage is not answering; its changes wait", project)
                with self._dirty_lock:
                    self._dirty |= {(project, rel, may) for rel, may in marks}
                continue
            if found is not None:
                measured[project] = found
        with self._record_lock:
            changes = [self.index.diff_many(project, found) for project, found in measured.items()]
            changes = [change for change in changes if change.runs or change.gone]
            if changes:
                try:
                    self.sink.record(changes)
                except Exception:
                    with self._dirty_lock:  # offer the same directories again next time
                        self._dirty |= dirty
                    raise
                for change in changes:
                    self.index.apply(change)
                note_lag(changes)
        if event_files and self.on_event_files is not None:
            self.on_event_files(event_files)
        return changes

    def _measure(
        self, project: str, marks: list[tuple[str, bool]]
    ) -> list[tuple[str, list[RunInfo]]] | None:
        """Every run at or under the marked paths of one project, or None for no project."""
        if not self._is_project(project):
            return None
        claimed = self.claims(project)
        targets = set()
        for rel, may_be_run in marks:
            target = owner_at_or_above(claimed, rel) or self.index.owner(project, rel)
            if target is None and may_be_run:
                target = rel
            if target is not None:
                targets.add(target)
        return [
            (rel, scan_under(self.root / project, project, rel, claimed))
            for rel in _outermost(targets)
        ]

    def _heal(self, event_files: set[tuple[str, str]]) -> None:
        """Ask for a restart of each board whose event files were rewritten in place."""
        if self.healer is None:
            return
        by_project: dict[str, list[str]] = {}
        for project, path in sorted(event_files):
            by_project.setdefault(project, []).append(path)
        for project, paths in by_project.items():
            for path in self.framing.rewritten_among(project, paths):
                self.healer.rewritten(project, f"event file {path} was rewritten in place")
        self.healer.send_due()


def note_lag(changes: list[ProjectChanges]) -> None:
    """The watcher's lag for /metrics: from the newest write among the runs just recorded
    to now (in polling mode, mostly the poll interval)."""
    newest = max((run.last_write for change in changes for run in change.runs), default=0.0)
    if newest > 0:
        instruments().watcher_lag.set(max(0.0, time.time() - newest))


def owner_at_or_above(runs: Container[str], rel: str) -> str | None:
    """The outermost of `runs` at or above `rel`, if any: a run owns everything under it."""
    parts = rel.split("/") if rel else []
    for depth in range(1, len(parts) + 1):
        if (candidate := "/".join(parts[:depth])) in runs:
            return candidate
    return None


def _outermost(rels: set[str]) -> list[str]:
    """Drop every path that lies under another one in the set (its walk covers it)."""
    if "" in rels:
        return [""]
    return sorted(r for r in rels if owner_at_or_above(rels, r.rpartition("/")[0]) is None)


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: StorageWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in QUIET_EVENTS:
            return
        if event.is_directory and event.event_type == "modified":
            return  # a directory's mtime: the file events inside it say more
        paths = [event.src_path, event.dest_path] if event.dest_path else [event.src_path]
        touched = False
        for path in paths:
            text = os.fsdecode(path)
            touched = self.watcher.event_path(text, event.is_directory) or touched
        if touched:
            self.watcher.on_change()
