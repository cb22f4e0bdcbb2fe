"""Event files grow in place, by whole TFRecord records only.

TensorBoard follows an event file while a job appends to it, so the file keeps its name and
grows. What it must never see is a torn record: a record cut by a chunk boundary would sit
at the end of the visible file for as long as the upload is stopped (for good, if it was
killed). So each chunk is split where its last whole record ends: the whole records are
appended to the event file, and the rest of the record they stop inside waits in a hidden
file beside it, `.<name with tfEvents>.tbhub-tail` (no board reads it), until the chunks
that complete it arrive. That holds for any client, any chunking, and records larger than
any chunk; the uploader cuts its chunks at record ends, so normally nothing waits.

The tail starts with the event file's size it continues (8 bytes); a tail that does not
match the event file is stale (a crash between the two writes) and is ignored, so the
server's copy is always the event file plus at most one record's beginning, and the upload
resumes from there. Bytes that are not TFRecord framing are let through as they are:
nothing would ever complete them.
"""

from __future__ import annotations

import os
import stat
import struct

from tbhub.core.errors import UnsafePath
from tbhub.core.upload_protocol import hidden_name
from tbhub.storage.tfrecord import HEADER_BYTES, RECORD_OVERHEAD, record_length, whole_records_end
from tbhub.storage.upload_io import (
    READ_FLAGS,
    WRITE_FLAGS,
    RoomCheck,
    lstat_file,
    offset_mismatch,
    open_locked,
    read_at,
    unlink_quietly,
    unsafe,
    write_durably,
)

TAIL_START = struct.Struct("<Q")  # the event file's size where the tail's bytes continue it


def events_end(dir_fd: int, name: str) -> int:
    """The bytes of the job's event file the server holds: the event file and its tail."""
    st = lstat_file(dir_fd, name)
    visible = st.st_size if st else 0
    try:
        fd = os.open(hidden_name(name), READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return visible
    try:  # anything but a plain file there holds nothing (and is refused on the next write)
        return visible + (_held(fd, visible) if stat.S_ISREG(os.fstat(fd).st_mode) else 0)
    finally:
        os.close(fd)


def _held(tail_fd: int, visible: int) -> int:
    """Bytes the tail holds back, or 0 when it does not continue an event file this long."""
    size = os.fstat(tail_fd).st_size
    start = os.pread(tail_fd, TAIL_START.size, 0)
    if size < TAIL_START.size or TAIL_START.unpack(start)[0] != visible:
        return 0
    return size - TAIL_START.size


def append_events(
    dir_fd: int, name: str, path: str, offset: int, data: bytes, room: RoomCheck
) -> int:
    """Append `data` at `offset` of the job's file; the server's new end. A chunk the server
    already holds is a retry (no write); another offset than the end is OffsetMismatch."""
    fd = open_locked(dir_fd, name, path, create=False)
    checked = False
    if fd is None:
        if offset != 0:
            raise offset_mismatch(path, 0)
        room(dir_fd, len(data))  # the file appears only once the chunk is known to fit
        checked = True
        fd = open_locked(dir_fd, name, path, create=True)
        assert fd is not None
    try:
        tail = _Tail.open(dir_fd, hidden_name(name), os.fstat(fd).st_size, path)
        try:
            if offset != tail.end:
                if not _holds(fd, tail, offset, data):
                    raise offset_mismatch(path, tail.end)
                return tail.end
            if not checked:
                room(dir_fd, len(data))
            cut = _cut(tail, data)
            if cut == tail.visible:  # still no whole record: the chunk waits with the rest
                tail.append(data)
            else:
                keep = cut - tail.end
                held = tail.read()  # usually nothing: chunks end where records end
                whole = held + data[:keep] if held else memoryview(data)[:keep]
                write_durably(fd, whole, tail.visible)
                tail.replace(cut, data[keep:])
            if checked:
                os.fsync(dir_fd)  # the new file's name is as durable as its first bytes
            return tail.end + len(data)
        finally:
            tail.close()
    finally:
        os.close(fd)


class _Tail:
    """The hidden file holding the beginning of a record not yet whole."""

    def __init__(self, dir_fd: int, name: str, visible: int, fd: int | None, held: int) -> None:
        self.dir_fd, self.name, self.visible, self.fd, self.held = dir_fd, name, visible, fd, held

    @classmethod
    def open(cls, dir_fd: int, name: str, visible: int, path: str) -> _Tail:
        try:
            fd = os.open(name, WRITE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return cls(dir_fd, name, visible, None, 0)
        except OSError as exc:
            raise unsafe(exc, path) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePath(f"{path}'s hidden tail is not a plain file; not writing to it")
        held = _held(fd, visible)
        if held == 0:  # stale or empty: what it held is in the event file, or must be resent
            os.ftruncate(fd, 0)
        return cls(dir_fd, name, visible, fd, held)

    @property
    def end(self) -> int:
        return self.visible + self.held

    def read(self, size: int | None = None) -> bytes:
        if self.fd is None:
            return b""
        wanted = self.held if size is None else min(size, self.held)
        return read_at(self.fd, wanted, TAIL_START.size)

    def append(self, data: bytes) -> None:
        if self.fd is None or self.held == 0:
            self.replace(self.visible, data)
            return
        write_durably(self.fd, data, TAIL_START.size + self.held)

    def replace(self, start: int, data: bytes) -> None:
        """The tail becomes `data`, continuing an event file `start` bytes long."""
        if not data:
            if self.fd is not None:
                unlink_quietly(self.dir_fd, self.name)
            return
        if self.fd is None:
            self.fd = os.open(self.name, WRITE_FLAGS | os.O_CREAT, 0o644, dir_fd=self.dir_fd)
        os.ftruncate(self.fd, 0)
        write_durably(self.fd, TAIL_START.pack(start) + data, 0)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _cut(tail: _Tail, data: bytes) -> int:
    """Where the whole records end once `data` follows what the server holds."""
    if tail.held == 0:
        return tail.end + whole_records_end(data)
    head = tail.read(HEADER_BYTES)
    head += data[: HEADER_BYTES - len(head)]
    if len(head) < HEADER_BYTES:
        return tail.visible
    length = record_length(head)
    new_end = tail.end + len(data)
    first = tail.visible + (length or 0) + RECORD_OVERHEAD
    if length is None or first < tail.end:
        return new_end  # not framing: nothing would ever complete it, so let it through
    if first > new_end:
        return tail.visible
    return tail.end + whole_records_end(data, first - tail.end)


def _holds(fd: int, tail: _Tail, offset: int, data: bytes) -> bool:
    """Whether the server already holds exactly `data` at `offset` (a retried chunk)."""
    if offset + len(data) > tail.end:
        return False
    held = b""
    if offset < tail.visible:
        held = read_at(fd, min(len(data), tail.visible - offset), offset)
    if len(held) < len(data):
        rest = len(data) - len(held)
        start = offset + len(held) - tail.visible
        held += tail.read(start + rest)[start:]
    return held == data
