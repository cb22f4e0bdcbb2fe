"""How many bytes each project holds, for upload quotas, without a walk per request.

With the storage watcher running (`tbhub serve`), its running totals are the answer and an
upload tells it at once which run changed. Without it, a walk by the scan retention uses
(storage/scan.py) is kept for `ttl` seconds and the bytes uploaded since are added to it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol

from tbhub.storage.scan import scan_project


class RunningTotals(Protocol):
    """What usage needs of the storage watcher (domain/watcher.py)."""

    def project_bytes(self, project: str) -> int | None: ...

    def mark_dirty(self, project: str, rel: str) -> None: ...


class ProjectUsage:
    def __init__(self, storage_root: Path, *, ttl: float = 10.0) -> None:
        self.storage_root = storage_root
        self.ttl = ttl
        self.watcher: RunningTotals | None = None
        self._walked: dict[str, tuple[float, int]] = {}  # project -> (when, bytes)
        self._lock = threading.Lock()

    def known_bytes(self, project: str) -> int | None:
        """The watcher's running total, when it has one: no walk (the projects page asks this
        for every project on each load)."""
        return self.watcher.project_bytes(project) if self.watcher is not None else None

    def bytes(self, project: str) -> int:
        known = self.known_bytes(project)
        if known is not None:
            return known
        with self._lock:
            walked = self._walked.get(project)
        if walked is not None and time.monotonic() - walked[0] < self.ttl:
            return walked[1]
        total = sum(run.bytes for run in scan_project(self.storage_root / project, project))
        with self._lock:
            self._walked[project] = (time.monotonic(), total)
        return total

    def wrote(self, project: str, run_path: str, size: int) -> None:
        """An upload added `size` bytes to `<project>/<run_path>`."""
        with self._lock:
            walked = self._walked.get(project)
            if walked is not None:
                self._walked[project] = (walked[0], walked[1] + size)
        if self.watcher is not None:
            self.watcher.mark_dirty(project, run_path)
