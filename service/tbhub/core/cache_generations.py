"""One generation counter per cache, shared by every process of a `tbhub serve`: a change
of who may do what (a sign-out, a revoked token, a removed member, a disabled user) bumps
the cache's generation, and every process drops that cache on its next lookup.

The counters live in a small memory-mapped file in the data dir, so a lookup reads the
generation with no system call; a bump (rare: a change, after it commits) takes a file lock
for its read-modify-write. Other replicas of a PostgreSQL installation hear of a bump
through `NOTIFY` (`announce`, and `serve/cache_events.py`, which bumps their file in turn).
Without a file (tests, one-off commands) the counters live in this process's memory.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

# Every cache that answers "who may do what" from memory: a slot each in the file.
CACHES = ("access", "token", "session", "share_link", "restriction", "compare")
FILE_NAME = "cache-generations"
_SLOT = struct.Struct("<Q")
_SIZE = _SLOT.size * len(CACHES)


class Generation:
    """One cache's counter: read on every lookup, bumped after a change commits."""

    def __init__(self, owner: Generations, index: int) -> None:
        self._owner, self._index = owner, index

    def current(self) -> int:
        return self._owner.read(self._index)

    def bump(self) -> None:
        self._owner.bump(self._index)


class Generations:
    """The counters of every cache in CACHES, in `path` (shared) or in memory (None).
    `announce(cache)` runs after each bump made here (NOTIFY to other replicas)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.announce: Callable[[str], None] = lambda _cache: None
        self._local_lock = threading.Lock()
        self._fd: int | None = None
        self._buffer: mmap.mmap | bytearray
        if path is None:
            self._buffer = bytearray(_SIZE)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)  # zeros; never shrinks a file a peer has mapped
            self._buffer = mmap.mmap(fd, _SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> Generations:
        return cls(data_dir / FILE_NAME)

    def of(self, cache: str) -> Generation:
        return Generation(self, CACHES.index(cache))

    def read(self, index: int) -> int:
        return int(_SLOT.unpack_from(self._buffer, index * _SLOT.size)[0])

    def bump(self, index: int, *, announce: bool = True) -> None:
        with self._local_lock:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                value = (self.read(index) + 1) % 2**64
                _SLOT.pack_into(self._buffer, index * _SLOT.size, value)
            finally:
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        if announce:
            self.announce(CACHES[index])

    def bump_all(self, *, announce: bool = True) -> None:
        for index in range(len(CACHES)):
            self.bump(index, announce=announce)

    def close(self) -> None:
        if isinstance(self._buffer, mmap.mmap):
            self._buffer.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
