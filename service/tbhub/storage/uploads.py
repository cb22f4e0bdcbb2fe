"""Files uploaded into a run directory, append-only and resumable, never seen half-written.

Two kinds of file, because the board reads them differently:

- **Event files** (any name containing `tfevents`, TensorBoard's own test) are appended in
  place. TensorBoard follows an event file while a job appends to it; a temp name and a rename
  per finished file would hide a live run until the job ends. A chunk is checked against its
  digest before one byte of it is written and must start exactly where the file ends, so the
  file is always a byte prefix of the job's own file. The uploader cuts chunks at whole
  TFRecord records, so the board sees whole records, as it does from a local writer; after a
  server crash mid-write the tail is a truncated record, which TensorBoard waits out like a
  writer mid-flush, and the resumed upload completes it.
- **Other files** (hparams.yaml, profiles, ...) grow under `.<name>.tbhub-partial` beside
  their final name, and the chunk that says it is the last is followed by fsync and a rename,
  so the final name only ever holds a whole file. That partial name never contains
  `tfevents`, so no board reads it.

Every path is walked from the run directory one component at a time with O_NOFOLLOW and files
are opened with O_NOFOLLOW, so a symlink is never followed. Writers of one file are serialised
by flock on the file, across threads and processes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Literal

from tbhub.errors import InsufficientStorage, OffsetMismatch, UnsafePath
from tbhub.jobs.fsops import DIR_FLAGS, open_below
from tbhub.upload_protocol import PARTIAL_SUFFIX, is_event_file

WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)

Kind = Literal["events", "file"]
RoomCheck = Callable[[int, int], None]  # (directory fd, bytes about to be written); raises


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


def partial_name(name: str) -> str:
    return f".{name}{PARTIAL_SUFFIX}"


# -- reading the state ----------------------------------------------------------------------


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    """stat of `name` without following it; None if missing; UnsafePath unless a plain file."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{name!r} in the run is a symlink, directory or device; not touching it")
    return st


def _state_in(dir_fd: int, parts: list[str]) -> FileState:
    name, path = parts[-1], "/".join(parts)
    if kind_of(name) == "events":
        st = _lstat(dir_fd, name)
        return FileState(path, st.st_size if st else 0, False, "events")
    partial = _lstat(dir_fd, partial_name(name))
    if partial is not None:
        return FileState(path, partial.st_size, False, "file")
    final = _lstat(dir_fd, name)
    return FileState(path, final.st_size if final else 0, final is not None, "file")


@contextmanager
def _parent(run_fd: int, parts: list[str], *, create: bool) -> Iterator[int | None]:
    """The directory holding the file, walked without symlinks; None if it does not exist."""
    try:
        fd = open_below(run_fd, parts[:-1], create=create)
    except FileNotFoundError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def file_state(run_fd: int, parts: list[str]) -> FileState:
    with _parent(run_fd, parts, create=False) as dir_fd:
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
    data: bytes,
    complete: bool,
    room: RoomCheck,
) -> FileState:
    """Write `data` at `offset` (already checked against its digest). A chunk the file already
    holds, byte for byte, is a retry and succeeds without writing; any other offset than the
    file's end is OffsetMismatch carrying that end. `complete` finishes a non-event file."""
    with _parent(run_fd, parts, create=True) as dir_fd:
        assert dir_fd is not None
        name = parts[-1]
        path = "/".join(parts)
        if kind_of(name) == "events":
            size = _write_at(dir_fd, name, offset, data, room, path)
            return FileState(path, size, False, "events")
        return _append_file(dir_fd, name, path, offset, data, complete, room)


def _append_file(
    dir_fd: int, name: str, path: str, offset: int, data: bytes, complete: bool, room: RoomCheck
) -> FileState:
    partial = partial_name(name)
    if _lstat(dir_fd, partial) is None:
        final = _lstat(dir_fd, name)
        if final is not None and _holds(dir_fd, name, offset, data, final.st_size):
            return FileState(path, final.st_size, True, "file")  # a retry of its last chunk
        if final is not None and offset > 0:
            raise OffsetMismatch(
                f"{path} is finished on the server with other content; upload the new "
                "version from offset 0",
                offset=0,
            )
    elif offset == 0 and not _holds(dir_fd, partial, 0, data, _size(dir_fd, partial)):
        _unlink_quietly(dir_fd, partial)  # a fresh start: nobody sees a partial file anyway
    size = _write_at(dir_fd, partial, offset, data, room, path)
    if not complete:
        return FileState(path, size, False, "file")
    if size != offset + len(data):
        raise OffsetMismatch(
            f"{path} holds {size} bytes on the server, more than this last chunk ends at; "
            "send the rest from there",
            offset=size,
        )
    try:
        fd = os.open(partial, WRITE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:  # another request finished it meanwhile
        return _state_in(dir_fd, [name]).renamed(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _lstat(dir_fd, partial) is None:  # another request finished it meanwhile
            return FileState(path, os.fstat(fd).st_size, True, "file")
        os.fsync(fd)
        if _is_dir(dir_fd, name):
            raise UnsafePath(f"{path} is a directory in the run; choose another file name")
        os.rename(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
        return FileState(path, os.fstat(fd).st_size, True, "file")
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, offset: int, data: bytes, room: RoomCheck, path: str) -> int:
    """Append `data` to `name` if `offset` is its end; the new size. Created when missing, but
    only once the chunk is known to fit, so a refused first chunk leaves no empty file."""
    created = False
    try:
        fd = os.open(name, WRITE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if offset != 0:
            raise OffsetMismatch(_offset_message(path, 0), offset=0) from None
        room(dir_fd, len(data))
        fd = _open_new(dir_fd, name)
        created = True
    except OSError as exc:
        raise _unsafe(exc, path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is not a plain file in the run; not writing to it")
        size = st.st_size
        if offset != size:
            _check_retry(dir_fd, name, offset, data, size, path)
            return size
        if not created:
            room(dir_fd, len(data))
        try:
            _write_all(fd, data, size)
            os.fdatasync(fd)  # durable before the 2xx; the size comes with the data
        except OSError as exc:
            os.ftruncate(fd, size)  # all or nothing
            if created and size == 0:
                _unlink_quietly(dir_fd, name)
            if exc.errno in FULL_DISK:
                raise InsufficientStorage(
                    "the storage is full; nothing of this chunk was kept. Free space or ask "
                    "an operator, then resume the upload"
                ) from None
            raise
        return size + len(data)
    finally:
        os.close(fd)


def _open_new(dir_fd: int, name: str) -> int:
    try:
        return os.open(name, WRITE_FLAGS | os.O_CREAT, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        raise _unsafe(exc, name) from None


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _check_retry(dir_fd: int, name: str, offset: int, data: bytes, size: int, path: str) -> None:
    """Pass if the file already holds exactly `data` at `offset`; else OffsetMismatch."""
    if not _holds(dir_fd, name, offset, data, size):
        raise OffsetMismatch(_offset_message(path, size), offset=size)


def _holds(dir_fd: int, name: str, offset: int, data: bytes, size: int) -> bool:
    if offset + len(data) > size:
        return False
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        return os.pread(fd, len(data), offset) == data
    finally:
        os.close(fd)


def _offset_message(path: str, size: int) -> str:
    return (
        f"{path} holds {size} bytes on the server; send the chunk that starts at offset {size} "
        "(Upload-Offset says it too)"
    )


def _unsafe(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
        return UnsafePath(f"{path} is a symlink, directory or device in the run; not writing it")
    return exc


def _size(dir_fd: int, name: str) -> int:
    st = _lstat(dir_fd, name)
    return st.st_size if st else 0


def _is_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
