"""The bytes a project's uploads hold and reserve, in one file per project that every
process of a `tbhub serve` shares: the count an upload quota is decided on, the same in
every API worker at the same moment.

A project's record (in `<data_dir>/upload-ledger/<project>`, read and changed under
`flock`) holds two counters, the last walk of the project's directory and the chunks in
flight:

- `reserved`: bytes of every chunk let in, less what a chunk gave back (all of it when its
  write failed, the rest when it wrote less);
- `settled`: bytes written by the chunks that have finished, so `reserved - settled` is
  what is being written right now;
- the walk: the bytes it found, the `settled` count read just before it began, and when;
- the chunks in flight per process: a small fixed table of (PID, start time, bytes let in
  and not yet settled), an entry for each process with a chunk under way.

The project uses `walk.bytes + reserved - walk.settled`: what the walk saw, plus every
chunk that finished after it began or is still being written. Each write is counted from
the moment its chunk is let in; one that lands while a walk runs may count twice (the walk
saw it, and it settled after the anchor), the safe side. The walk, which also sees bytes
that came by other ways than an upload and the space retention freed, is redone by one
process at a time once it is `ttl` old; until then the others decide on the old one.

A process that dies between letting a chunk in and settling it (an API worker killed;
`tbhub serve` starts another) cannot settle it. The process that next redoes the walk first
looks for such entries: a process that is gone (its PID no longer alive, a zombie, or a
PID taken by another process: processes.ProcessRef compares start times) has its chunks
settled as written in full, the safe side, since it may have written them, and the walk
that follows counts what they really left. So a dead process's chunks are given back at
the next walk, within `ttl`, with no restart. Should the table ever be full (it has room
for far more processes than a server runs), a chunk goes untracked, and one of those
left by a dead process stays counted until `tbhub serve` starts again (`clear`): the
quota stricter by it, never looser.
"""

from __future__ import annotations

import fcntl
import functools
import os
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tbhub.core.names import PROJECT_SLUG
from tbhub.core.processes import ProcessRef

DIR_NAME = "upload-ledger"
# reserved, settled, walk bytes, walk's settled anchor, walk began (ns), walk claimed (ns)
_HEADER = struct.Struct("<6q")
_SLOT = struct.Struct("<qdq")  # PID, its start time (ProcessRef.create_time), bytes in flight
SLOTS = 32  # processes with chunks in flight at once: a server runs at most a few
_SIZE = _HEADER.size + SLOTS * _SLOT.size
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC

Owner = tuple[int, float]  # a process: its PID and start time


@dataclass
class _Record:
    reserved: int = 0
    settled: int = 0
    walked: int = 0
    anchor: int = 0
    walk_began: int = 0  # CLOCK_MONOTONIC ns, one clock for every process of the host; 0: none
    walk_claimed: int = 0  # when a process began the walk that will replace it; 0: nobody
    in_flight: dict[Owner, int] = field(default_factory=dict)  # at most SLOTS entries

    def used(self) -> int:
        return self.walked + self.reserved - self.anchor

    def let_in(self, owner: Owner, size: int, is_alive: Callable[[Owner], bool]) -> None:
        """`size` bytes let in for `owner`, kept in its entry unless the table is full (of
        live processes: dead ones are given back first to make room)."""
        self.reserved += size
        if not size:
            return
        if owner not in self.in_flight and len(self.in_flight) >= SLOTS:
            self.give_back_dead(is_alive)
        if owner in self.in_flight or len(self.in_flight) < SLOTS:
            self.in_flight[owner] = self.in_flight.get(owner, 0) + size

    def settle(self, owner: Owner, reserved: int, written: int) -> None:
        self.reserved -= reserved - written
        self.settled += written
        left = self.in_flight.pop(owner, 0) - reserved  # below 0: the chunk went untracked
        if left > 0:
            self.in_flight[owner] = left

    def give_back_dead(self, is_alive: Callable[[Owner], bool]) -> None:
        """The chunks of processes that are gone, settled as written in full: the next walk
        counts what they left."""
        for owner in [owner for owner in self.in_flight if not is_alive(owner)]:
            self.settled += self.in_flight.pop(owner)

    def pack(self) -> bytes:
        header = _HEADER.pack(self.reserved, self.settled, self.walked, self.anchor,
                              self.walk_began, self.walk_claimed)  # fmt: skip
        slots = [_SLOT.pack(pid, start, size) for (pid, start), size in self.in_flight.items()]
        return header + b"".join(slots) + bytes(_SIZE - _HEADER.size - len(slots) * _SLOT.size)

    @classmethod
    def unpack(cls, raw: bytes) -> _Record:
        """A record as packed; a missing or short one is empty, and one from before the
        table (a header alone) has no chunks in flight."""
        if len(raw) < _HEADER.size:
            return cls()
        record = cls(*_HEADER.unpack_from(raw))
        if len(raw) == _SIZE:
            for pid, start, size in _SLOT.iter_unpack(raw[_HEADER.size :]):
                if pid:
                    record.in_flight[(pid, start)] = size
        return record


def alive(owner: Owner) -> bool:
    """Whether the process is still running: the same PID and start time, not a zombie."""
    return owner == this_process() or ProcessRef(*owner).is_alive()


def this_process() -> Owner:
    """This process's PID and start time (a forked child's are its own)."""
    pid = os.getpid()
    return pid, _start_time(pid)


@functools.cache
def _start_time(pid: int) -> float:
    return ProcessRef.of(pid).create_time


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
            record.give_back_dead(alive)  # so the walk counts what they really left
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
            record.settle(this_process(), reserved, written)

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
        record.let_in(this_process(), size, alive)
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
            record = _Record.unpack(os.pread(fd, _SIZE, 0))
            before = record.pack()
            yield record
            after = record.pack()
            if after != before:
                os.pwrite(fd, after, 0)
        finally:
            os.close(fd)
