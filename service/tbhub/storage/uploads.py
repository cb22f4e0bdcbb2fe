"""Files uploaded into a run directory, append-only and resumable, never seen half-written.

Two kinds of file, because the board reads them differently:

- **Event files** (any name containing `tfevents`, TensorBoard's own test) are appended in
  place, by whole TFRecord records only: storage/event_upload.py.
- **Other files** (hparams.yaml, profiles, ...) grow under `.<name>.tbhub-partial` beside
  their final name, and the chunk that says it is the last is followed by a rename and an
  fsync of the directory, so the final name only ever holds a whole file. That partial name
  never contains `tfevents`, so no board reads it.

A chunk is checked against its digest before one byte of it is written and must start
exactly where the server's copy ends, so that copy is always a byte prefix of the job's own
file. Every path is walked from the run directory one component at a time with O_NOFOLLOW
and files are opened with O_NOFOLLOW, so a symlink is never followed. Writers of one file
take turns (flock on the file, re-checked under its name after a rename), across threads and
processes, so any number of racing uploads of one file end as one of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from tbhub.core.errors import OffsetMismatch, UnsafePath
from tbhub.core.upload_protocol import PARTIAL_SUFFIX, TAIL_SUFFIX, hidden_name, is_event_file
from tbhub.storage.event_upload import append_events, events_end
from tbhub.storage.fsops import DIR_FLAGS, open_below
from tbhub.storage.upload_io import (
    READ_FLAGS,
    RoomCheck,
    is_dir,
    lstat_file,
    offset_mismatch,
    open_locked,
    read_at,
    start_writeback,
    write_durably,
)

Kind = Literal["events", "file"]
__all__ = [
    "FileState",
    "Finishing",
    "OpenDirs",
    "RoomCheck",
    "append_chunk",
    "file_state",
    "kind_of",
    "list_files",
]


@dataclass(frozen=True)
class FileState:
    path: str
    offset: int  # bytes the server holds: send from here
    complete: bool  # a non-event file renamed to its final name (event files never are)
    kind: Kind

    def renamed(self, path: str) -> FileState:
        return FileState(path, self.offset, self.complete, self.kind)

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "offset": self.offset,
            "complete": self.complete,
            "kind": self.kind,
        }


def kind_of(name: str) -> Kind:
    return "events" if is_event_file(name) else "file"


# -- reading the state ----------------------------------------------------------------------


def _state_in(dir_fd: int, parts: list[str]) -> FileState:
    name, path = parts[-1], "/".join(parts)
    if kind_of(name) == "events":
        return FileState(path, events_end(dir_fd, name), False, "events")
    partial = lstat_file(dir_fd, hidden_name(name))
    if partial is not None:
        return FileState(path, partial.st_size, False, "file")
    final = lstat_file(dir_fd, name)
    return FileState(path, final.st_size if final else 0, final is not None, "file")


class OpenDirs:
    """A run's directories, each walked and opened once while one request writes many files
    into them (a batch of small files in a few directories); closed together at the end."""

    def __init__(self, run_fd: int) -> None:
        self.run_fd = run_fd
        self._fds: dict[tuple[str, ...], int] = {}

    def get(self, parents: tuple[str, ...], *, create: bool) -> int | None:
        """The directory's fd, walked without symlinks; None if it does not exist."""
        fd = self._fds.get(parents)
        if fd is None:
            try:
                fd = open_below(self.run_fd, list(parents), create=create, durable=create)
            except FileNotFoundError:
                return None
            self._fds[parents] = fd
        return fd

    def __enter__(self) -> OpenDirs:
        return self

    def __exit__(self, *_exc: object) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


@contextmanager
def _parent(
    run_fd: int, parts: list[str], *, create: bool, dirs: OpenDirs | None = None
) -> Iterator[int | None]:
    """The directory holding the file, walked without symlinks; None if it does not exist.
    From `dirs` when given (it closes it), else opened for this call alone."""
    if dirs is not None:
        yield dirs.get(tuple(parts[:-1]), create=create)
        return
    with OpenDirs(run_fd) as own:
        yield own.get(tuple(parts[:-1]), create=create)


def file_state(run_fd: int, parts: list[str], *, dirs: OpenDirs | None = None) -> FileState:
    with _parent(run_fd, parts, create=False, dirs=dirs) as dir_fd:
        if dir_fd is None:
            return FileState("/".join(parts), 0, False, kind_of(parts[-1]))
        return _state_in(dir_fd, parts)


def list_files(run_fd: int) -> list[FileState]:
    """Every file uploaded (or being uploaded) into the run, by its final path."""
    found: dict[str, FileState] = {}
    _list(run_fd, [], found)
    return sorted(found.values(), key=lambda state: state.path)


def _list(dir_fd: int, prefix: list[str], found: dict[str, FileState]) -> None:
    with os.scandir(dir_fd) as entries:
        listed = list(entries)
    for entry in listed:
        if entry.is_dir(follow_symlinks=False):
            try:
                sub = os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                _list(sub, [*prefix, entry.name], found)
            finally:
                os.close(sub)
        elif entry.is_file(follow_symlinks=False):
            name = entry.name
            if name.startswith(".") and name.endswith(TAIL_SUFFIX):
                continue  # the beginning of an event file's next record: counted with it
            if name.startswith(".") and name.endswith(PARTIAL_SUFFIX):
                name = name[1 : -len(PARTIAL_SUFFIX)]
            parts = [*prefix, name]
            try:
                found["/".join(parts)] = _state_in(dir_fd, parts)
            except (UnsafePath, OSError):
                continue


# -- writing ----------------------------------------------------------------------------------


def append_chunk(
    run_fd: int,
    parts: list[str],
    *,
    offset: int,
    data: bytes | memoryview,
    complete: bool,
    room: RoomCheck,
    finishing: Finishing | None = None,
    dirs: OpenDirs | None = None,
) -> FileState:
    """Write `data` at `offset` (already checked against its digest). A chunk the file already
    holds, byte for byte, is a retry and succeeds without writing; any other offset than the
    file's end is OffsetMismatch carrying that end. `complete` finishes a non-event file.

    The file's bytes and its new name are on disk before this returns, unless `finishing`
    is given and this chunk finishes a non-event file: then the file is handed to it,
    written but neither synced nor renamed, and is whole under its name, durably, once the
    caller has called `finishing.finish()` (a batch of many small files: see Finishing)."""
    if finishing is not None:
        dirs = finishing.dirs  # it renames in the directories these hold open
    with _parent(run_fd, parts, create=True, dirs=dirs) as dir_fd:
        assert dir_fd is not None
        name = parts[-1]
        path = "/".join(parts)
        if kind_of(name) == "events":
            size = append_events(dir_fd, name, path, offset, bytes(data), room)
            return FileState(path, size, False, "events")
        return _append_file(dir_fd, name, path, offset, data, complete, room,
                            finishing=finishing, parents=tuple(parts[:-1]))  # fmt: skip


@dataclass
class _Written:
    """A whole file written under its partial name, still open and locked, to be renamed in
    its directory (`parents`, kept open by Finishing's OpenDirs)."""

    parents: tuple[str, ...]
    fd: int
    partial: str
    name: str


class Finishing:
    """Whole files of one request, made durable together instead of one by one.

    Each file is written under its partial name (locked, as always) and handed here; every
    `group` files, and at `finish()`, their writeback is started for all of them at once,
    then each is fdatasynced (most find their bytes already on disk: the first sync's
    journal commit carried the others), then renamed into place; the directories renamed
    into are fsynced once, after their last rename. So every file's bytes are still on disk
    before its name shows it, and every name before the request answers, at a fraction of
    a journal commit per file."""

    def __init__(self, dirs: OpenDirs, group: int = 64) -> None:
        self.dirs = dirs
        self.group = group
        self._written: list[_Written] = []
        self._renamed: set[tuple[str, ...]] = set()

    def add(self, written: _Written) -> None:
        self._written.append(written)
        if len(self._written) >= self.group:
            self._finish_written()

    def _finish_written(self) -> None:
        written, self._written = self._written, []
        try:
            for item in written:
                start_writeback(item.fd)
            for item in written:
                os.fdatasync(item.fd)
            for item in written:
                dir_fd = self.dirs.get(item.parents, create=False)
                assert dir_fd is not None  # opened by the request's OpenDirs, held open
                os.rename(item.partial, item.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                self._renamed.add(item.parents)
        finally:
            for item in written:
                os.close(item.fd)

    def finish(self) -> None:
        """Every file handed here durable under its name (the directories fsynced)."""
        try:
            self._finish_written()
        finally:
            renamed, self._renamed = self._renamed, set()
            for parent in sorted(renamed):
                fd = self.dirs.get(parent, create=False)
                if fd is not None:
                    os.fsync(fd)


def _append_file(
    dir_fd: int,
    name: str,
    path: str,
    offset: int,
    data: bytes | memoryview,
    complete: bool,
    room: RoomCheck,
    *,
    finishing: Finishing | None,
    parents: tuple[str, ...],
) -> FileState:
    """A chunk of a non-event file, under the lock of its partial file from the first look to
    the rename, so racing uploads of one file take turns and each sees the last one's end.
    With `finishing`, a last chunk is written unsynced and the file handed to it (see
    Finishing), which renames it."""
    partial = hidden_name(name)
    fd = open_locked(dir_fd, partial, path, create=False)
    checked = fd is None
    if fd is None:
        final = lstat_file(dir_fd, name)
        if final is not None and _holds_whole(dir_fd, name, offset, data, final, complete):
            return FileState(path, final.st_size, True, "file")  # a retry of its last chunk
        if offset != 0:
            raise OffsetMismatch(
                f"{path} is finished on the server with other content; upload the new "
                "version from offset 0"
                if final is not None
                else f"the server holds nothing of {path}; send it from offset 0",
                offset=0,
            )
        room(dir_fd, len(data))  # the partial file appears only once the chunk fits
        fd = open_locked(dir_fd, partial, path, create=True)
        assert fd is not None
    try:
        size = os.fstat(fd).st_size
        if offset == 0 and size and not _fd_holds(fd, 0, data, size):
            os.ftruncate(fd, 0)  # a fresh start: nobody sees a partial file anyway
            size = 0
        if offset != size:
            if not _fd_holds(fd, offset, data, size):
                raise offset_mismatch(path, size)
        else:
            if not checked:
                room(dir_fd, len(data))
            write_durably(fd, data, size, sync=not (complete and finishing), direct=True)
            size += len(data)
        if not complete:
            return FileState(path, size, False, "file")
        if size != offset + len(data):
            raise OffsetMismatch(
                f"{path} holds {size} bytes on the server, more than this last chunk ends at; "
                "send the rest from there",
                offset=size,
            )
        if is_dir(dir_fd, name):
            raise UnsafePath(f"{path} is a directory in the run; choose another file name")
        if finishing is not None:  # it syncs the bytes, then renames: the fd goes with it
            finishing.add(_Written(parents, fd, partial, name))
            fd = -1
            return FileState(path, size, True, "file")
        # No fsync of the file here: every byte of it went through write_durably already.
        os.rename(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        return FileState(path, size, True, "file")
    finally:
        if fd >= 0:
            os.close(fd)


def _holds_whole(
    dir_fd: int,
    name: str,
    offset: int,
    data: bytes | memoryview,
    final: os.stat_result,
    complete: bool,
) -> bool:
    """A finished file already holds `data` at `offset` (ending the file, for a last chunk)."""
    if complete and offset + len(data) != final.st_size:
        return False
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        return _fd_holds(fd, offset, data, final.st_size)
    finally:
        os.close(fd)


def _fd_holds(fd: int, offset: int, data: bytes | memoryview, size: int) -> bool:
    return offset + len(data) <= size and read_at(fd, len(data), offset) == data
