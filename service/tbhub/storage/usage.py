"""How many bytes each project holds: for the pages, the storage watcher's running totals;
for upload quotas, the ledger every process of the server shares (storage/quota_ledger.py).

The watcher's totals lag the writes (it rescans a run after an upload marks it changed) and
live in the first process alone, so a quota is never decided on them: every process asks
the ledger, whose count holds every chunk let in by any process, from the moment it is let
in, on a walk of the whole project directory (every byte under it, in runs or not).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from tbhub.storage.fsops import DIR_FLAGS
from tbhub.storage.quota_ledger import Decision, QuotaLedger
from tbhub.storage.scan import measure_dir


class RunningTotals(Protocol):
    """What usage needs of the storage watcher (domain/watcher.py)."""

    def project_bytes(self, project: str) -> int | None: ...

    def mark_dirty(self, project: str, rel: str) -> None: ...


class ProjectUsage:
    def __init__(self, storage_root: Path, ledger: QuotaLedger) -> None:
        self.storage_root = storage_root
        self.ledger = ledger
        self.watcher: RunningTotals | None = None

    def known_bytes(self, project: str) -> int | None:
        """The watcher's running total, when it has one: no walk (the projects page asks this
        for every project on each load)."""
        return self.watcher.project_bytes(project) if self.watcher is not None else None

    def reserve(self, project: str, size: int, quota: int) -> Decision:
        """Let a chunk of `size` bytes in when the project stays within `quota` with it;
        `settle` must follow, whatever the write does."""
        return self.ledger.reserve(project, size, quota, walk=lambda: self.walk(project))

    def settle(self, project: str, reserved: int, written: int) -> None:
        self.ledger.settle(project, reserved, written)

    def walk(self, project: str) -> int:
        """Every byte under the project's directory, no symlink followed (0 when it is gone)."""
        root = os.open(self.storage_root.resolve(), DIR_FLAGS)
        try:
            return measure_dir(root, project)[0]
        finally:
            os.close(root)

    def wrote(self, project: str, run_path: str) -> None:
        """An upload added bytes to `<project>/<run_path>`: the watcher rescans it."""
        if self.watcher is not None:
            self.watcher.mark_dirty(project, run_path)
