"""Event files rewritten in place, which a running board would never read again.

TensorBoard's Rust data server marks an event file dead at the first record header whose
length CRC does not match (`BadLengthCrc`), and reads it again only after a restart: NFS can
show a file's new length before its data (zero blocks), and a writer may fill a zero-filled
file in place later (TENSORBOARD-NOTES, emote#138). The watcher sees both: for each event
file it hears about, `FramingWatch` walks the record headers it has not checked yet (one
12-byte read per record, from where it stopped) and remembers a header it found broken.
When that header is whole later, or the file shrank (written over from the start), the
file was rewritten in place and the project's board must restart to read it; `Healer`
asks for that restart, at most once per `min_gap` seconds per project, so it cannot storm.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import TbhubError, UnsafePath
from tbhub.storage.fsops import open_below, split_relative
from tbhub.storage.paths import open_project
from tbhub.storage.run_files import opened_run
from tbhub.storage.tfrecord import HEADER_BYTES, RECORD_OVERHEAD, record_length

log = logging.getLogger("tbhub.watcher")

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
WALK_CHUNK = 64 * 1024  # bytes read at a time while walking record headers


@dataclass(frozen=True)
class _Seen:
    size: int
    checked_until: int  # a record boundary: every header before it was whole
    broken_at: int | None  # the header there had a bad length CRC at the last look


def _walk(fd: int, start: int, size: int) -> tuple[int, int | None]:
    """(where the whole records from `start` end, the offset of a broken header or None).
    The headers are read from chunks of up to WALK_CHUNK bytes: a file that got ten small
    records since the last look costs one read, not ten (1,000 runs writing made 10,000)."""
    pos = start
    while pos + HEADER_BYTES <= size:
        chunk = os.pread(fd, min(WALK_CHUNK, size - pos), pos)
        if len(chunk) < HEADER_BYTES:
            break
        at = 0
        while at + HEADER_BYTES <= len(chunk):
            length = record_length(chunk[at : at + HEADER_BYTES])
            if length is None:
                return pos + at, pos + at
            end = at + length + RECORD_OVERHEAD
            if pos + end > size:
                return pos + at, None  # a record still being written: go on from here later
            at = end
        pos += at  # past the chunk when its last record ends beyond it
    return pos, None


class FramingWatch:
    """What each event file's framing looked like when the watcher last read it."""

    def __init__(self, storage_root: Path) -> None:
        self.storage_root = storage_root
        self._files: dict[tuple[str, str], _Seen] = {}

    def rewritten_among(self, project: str, paths: Iterable[str]) -> list[str]:
        """`rewritten` for several files of one project, whose directory is opened (and
        checked, storage/paths.py) once for all of them: per file, that check was most of
        what the watcher did with 1,000 runs writing."""
        try:
            project_fd = open_project(self.storage_root, project)
        except (OSError, TbhubError):  # gone, or no project directory a board reads
            for path in paths:
                self._files.pop((project, path), None)
            return []
        try:
            return [path for path in paths if self.rewritten(project, path, project_fd)]
        finally:
            os.close(project_fd)

    def rewritten(self, project: str, path: str, project_fd: int | None = None) -> bool:
        """Look at `<project>/<path>` again; True when it was rewritten in place since the
        last look (a broken header became whole, or the file shrank). `project_fd`: the
        project's directory, opened by storage/paths.open_project."""
        directory, _, name = path.rpartition("/")
        key = (project, path)
        try:
            if project_fd is None:
                with opened_run(self.storage_root, project, directory) as dir_fd:
                    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
            else:
                dir_fd = open_below(project_fd, split_relative(directory))
                try:
                    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
                finally:
                    os.close(dir_fd)
        except (OSError, UnsafePath):  # gone, or behind a symlink: nothing a board reads
            self._files.pop(key, None)
            return False
        try:
            size = os.fstat(fd).st_size
            old = self._files.get(key)
            rewritten = old is not None and (
                size < old.size
                or (old.broken_at is not None and _whole_header(fd, old.broken_at, size))
            )
            start = 0 if old is None or rewritten else old.checked_until
            if old is not None and not rewritten and old.broken_at is not None:
                self._files[key] = _Seen(size, old.checked_until, old.broken_at)
                return False
            checked, broken = _walk(fd, start, size)
            self._files[key] = _Seen(size, checked, broken)
            if broken is not None and (old is None or old.broken_at is None):
                log.info("%s/%s: broken record header at byte %d", project, path, broken)
            return rewritten
        finally:
            os.close(fd)


def _whole_header(fd: int, offset: int, size: int) -> bool:
    if offset + HEADER_BYTES > size:
        return False
    return record_length(os.pread(fd, HEADER_BYTES, offset)) is not None


class Healer:
    """Asks for a board restart per project, at most once per `min_gap` seconds; a request
    that comes sooner waits until the gap has passed (`due` says how long)."""

    def __init__(
        self,
        request: Callable[[str, str], None],
        *,
        min_gap: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.request = request
        self.min_gap = min_gap
        self.clock = clock
        self._last: dict[str, float] = {}
        self._pending: dict[str, str] = {}
        self._lock = threading.Lock()

    def rewritten(self, project: str, why: str) -> None:
        with self._lock:
            self._pending[project] = why
        self.send_due()

    def due(self) -> float | None:
        """Seconds until the next waiting request may go; None when none waits."""
        with self._lock:
            if not self._pending:
                return None
            now = self.clock()
            waits = [self._last.get(p, -self.min_gap) + self.min_gap - now for p in self._pending]
        return max(0.0, min(waits))

    def send_due(self) -> None:
        now = self.clock()
        with self._lock:
            ready = {
                project: why
                for project, why in self._pending.items()
                if now - self._last.get(project, now - self.min_gap) >= self.min_gap
            }
            for project in ready:
                del self._pending[project]
                self._last[project] = now
        for project, why in ready.items():
            log.warning("restarting the board of %s: %s", project, why)
            try:
                self.request(project, why)
            except Exception:  # the database is away: the next rewrite asks again
                log.exception("could not request a restart of the board of %s", project)
