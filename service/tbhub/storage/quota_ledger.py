"""The bytes a project's uploads hold and reserve, in one file per project that every
process of a `tbhub serve` shares: the count an upload quota is decided on, the same in
every API worker at the same moment.

A project's record (in `<data_dir>/upload-ledger/<project>`, read and changed under
`flock`) holds two counters and the last walk of the project's directory:

- `reserved`: bytes of every chunk let in, less what a chunk gave back (all of it when its
  write failed, the rest when it wrote less);
- `settled`: bytes written by the chunks that have finished, so `reserved - settled` is
  what is being written right now;
- the walk: the bytes it found, the `settled` count read just before it began, and when.

The project uses `walk.bytes + reserved - walk.settled`: what the walk saw, plus every
chunk that finished after it began or is still being written. Each write is counted from
the moment its chunk is let in; one that lands while a walk runs may count twice (the walk
saw it, and it settled after the anchor), the safe side. The walk, which also sees bytes
that came by other ways than an upload and the space retention freed, is redone by one
process at a time once it is `ttl` old; until then the others decide on the old one.

A process that dies between letting a chunk in and settling it leaves that chunk counted
until `tbhub serve` starts again (`clear`): the quota is stricter by it, never looser.
"""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from pathlib import Path

from tbhub.core.names import PROJECT_SLUG

DIR_NAME = "upload-ledger"
# reserved, settled, walk bytes, walk's settled anchor, walk began (ns), walk claimed (ns)
_RECORD = struct.Struct("<6q")
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Record:
    reserved: int = 0
    settled: int = 0
    walked: int = 0
    anchor: int = 0
    walk_began: int = 0  # CLOCK_MONOTONIC ns, one clock for every process of the host; 0: none
    walk_claimed: int = 0  # when a process began the walk that will replace it; 0: nobody

    def used(self) -> int:
        return self.walked + self.reserved - self.anchor


@dataclass(frozen=True)
class Decision:
    granted: bool
    used: int  # bytes the project holds or is receiving, before this chunk


class QuotaLedger:
    def __init__(self, directory: Path, *, ttl: float = 10.0) -> None:
        self.directory = directory
        self.ttl_ns = int(ttl * 1e9)

    @classmethod
    def in_data_dir(cls, data_dir: Path, *, ttl: float = 10.0) -> QuotaLedger:
        return cls(data_dir / DIR_NAME, ttl=ttl)

    def reserve(self, project: str, size: int, quota: int, walk: Callable[[], int]) -> Decision:
        """Let a `size`-byte chunk in when the project's count stays within `quota`, adding
        it to the count in the same step. `walk()` measures the project's directory; it runs
        outside the lock, when there is no walk yet or this process is the one to redo it.
        A walk that fails (a lost mount) lets nothing in and gives its claim back."""
        with self._locked(project) as record:
            now = time.monotonic_ns()
            if record.walk_began:  # without a walk nobody can decide: each asker walks
                fresh = not self._due(record.walk_began, now)
                walking = record.walk_claimed and not self._due(record.walk_claimed, now)
                if fresh or walking:
                    return self._decide(record, size, quota)
            record.walk_claimed = now
            anchor = record.settled
        began = time.monotonic_ns()
        try:
            walked = walk()
        except BaseException:  # nothing was let in; the next asker walks, not in ttl
            with self._locked(project) as record:
                if record.walk_claimed == now:
                    record.walk_claimed = 0
            raise
        with self._locked(project) as record:
            stored_is_newer = began < record.walk_began <= time.monotonic_ns()
            if not stored_is_newer:  # a walk from before a reboot is never newer
                record.walked, record.anchor, record.walk_began = walked, anchor, began
                record.walk_claimed = 0
            return self._decide(record, size, quota)

    def settle(self, project: str, reserved: int, written: int) -> None:
        """A chunk let in with `reserved` bytes has finished, having added `written` bytes
        (0 when its write failed before any landed)."""
        written = max(0, min(written, reserved))
        with self._locked(project) as record:
            record.reserved -= reserved - written
            record.settled += written

    def clear(self) -> None:
        """Forget every record: `tbhub serve` starts with no chunk in flight."""
        if not self.directory.is_dir():
            return
        for entry in self.directory.iterdir():
            if PROJECT_SLUG.fullmatch(entry.name):
                entry.unlink(missing_ok=True)

    def _due(self, since: int, now: int) -> bool:
        """`since` is ttl old (or from before a reboot: the clock restarted below it)."""
        return not 0 <= now - since < self.ttl_ns

    @staticmethod
    def _decide(record: _Record, size: int, quota: int) -> Decision:
        used = record.used()
        if used + size > quota:
            return Decision(False, used)
        record.reserved += size
        return Decision(True, used)

    @contextmanager
    def _locked(self, project: str) -> Iterator[_Record]:
        """The project's record under an exclusive lock; written back if changed."""
        if not PROJECT_SLUG.fullmatch(project):
            raise ValueError(f"not a project name: {project!r}")
        try:
            fd = os.open(self.directory / project, _FLAGS, 0o600)
        except FileNotFoundError:  # the first project with a quota since the data dir began
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.directory / project, _FLAGS, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when the fd closes
            raw = os.pread(fd, _RECORD.size, 0)
            record = _Record(*_RECORD.unpack(raw)) if len(raw) == _RECORD.size else _Record()
            before = _RECORD.pack(*astuple(record))
            yield record
            after = _RECORD.pack(*astuple(record))
            if after != before:
                os.pwrite(fd, after, 0)
        finally:
            os.close(fd)
