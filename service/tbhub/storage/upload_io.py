"""The file operations uploads are made of, by directory fd and never through a symlink:
opening a file locked under its name, all-or-nothing durable writes, and reading back."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from tbhub.core.errors import InsufficientStorage, OffsetMismatch, UnsafePath

WRITE_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)

RoomCheck = Callable[[int, int], None]  # (directory fd, bytes about to be written); raises


def lstat_file(dir_fd: int, name: str) -> os.stat_result | None:
    """stat of `name` without following it; None if missing; UnsafePath unless a plain file."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{name!r} in the run is a symlink, directory or device; not touching it")
    return st


def size_of(dir_fd: int, name: str) -> int:
    st = lstat_file(dir_fd, name)
    return st.st_size if st else 0


def open_locked(dir_fd: int, name: str, path: str, *, create: bool) -> int | None:
    """`name` opened and exclusively flocked, still under that name once the lock is held (a
    writer that renamed or removed it meanwhile makes this look again); None when missing
    and not `create`. Every writer of a name goes through here, so they take turns."""
    while True:
        try:
            fd = os.open(name, WRITE_FLAGS | (os.O_CREAT if create else 0), 0o644, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise unsafe(exc, path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(f"{path} is not a plain file in the run; not writing to it")
            try:
                named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                named = None
        except BaseException:
            os.close(fd)
            raise
        if named is not None and (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino):
            return fd
        os.close(fd)  # renamed or removed while we waited: open what the name is now


def write_durably(
    fd: int, data: bytes | memoryview, offset: int, *, sync: bool = True, direct: bool = False
) -> None:
    """`data` at `offset`, on disk before this returns (unless not `sync`: then the caller
    fdatasyncs it before it answers); on failure the file is cut back to `offset`, so
    nothing of it stays. `direct`: a large chunk's block-aligned part goes to the disk
    without the page cache (see write_direct); the fdatasync that follows is the same."""
    view = memoryview(data)
    start = offset
    try:
        if direct:
            written = write_direct(fd, data, offset)
            view = view[written:]
            offset += written
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written
        if sync:
            os.fdatasync(fd)  # durable before the 2xx; the size comes with the data
    except OSError as exc:
        os.ftruncate(fd, start)
        if exc.errno in FULL_DISK:
            raise InsufficientStorage(
                "the storage is full; nothing of this chunk was kept. Free space or ask "
                "an operator, then resume the upload"
            ) from None
        raise


DIRECT_BLOCK = 4096  # O_DIRECT's alignment of offsets, lengths and memory on Linux
DIRECT_MIN_BYTES = 1 << 20  # below this the page cache's copy costs less than the setup
_direct_buffers = threading.local()  # one aligned buffer per writing thread, reused


def direct_length(size: int, offset: int) -> int:
    """How many bytes from `offset` write_direct takes: the whole blocks of a large chunk
    that starts on a block boundary; 0 for a small or unaligned one."""
    if not hasattr(os, "O_DIRECT") or offset % DIRECT_BLOCK or size < DIRECT_MIN_BYTES:
        return 0
    return size - size % DIRECT_BLOCK


def write_direct(fd: int, data: bytes | memoryview, offset: int) -> int:
    """Write the leading whole blocks of `data` at `offset` with O_DIRECT, from an aligned
    buffer straight to the disk, and say how many bytes that was (0: none; the caller
    writes the rest through the page cache as usual).

    Why: a chunk copied into the page cache costs the kernel more CPU than the copy into
    the aligned buffer (on the benchmark host, a VM, 0.6-3.5 s per GiB against 0.2 s),
    and a finished checkpoint's bytes are rarely read back soon. The fdatasync after it
    is still what makes the chunk durable (the device's write cache, the file's size). A
    filesystem that refuses O_DIRECT (EINVAL) gets the buffered write instead."""
    length = direct_length(len(data), offset)
    if not length:
        return 0
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return 0
        raise
    done = 0
    try:
        with _in_aligned_buffer(data, length) as buffer:
            while done < length:
                written = os.pwrite(fd, buffer[done:length], offset + done)
                if not written or written % DIRECT_BLOCK:
                    return done + written  # a short write: the rest goes buffered
                done += written
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return done  # refused after all (a device's own alignment): buffered
        raise
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    return done


def gathered(pieces: list[bytes], size: int) -> memoryview:
    """The pieces of a chunk (`size` bytes in all) put together in this thread's aligned
    buffer, for write_direct to write from without copying them again. Valid until this
    thread gathers its next chunk."""
    view = memoryview(_aligned_buffer(size))[:size]
    at = 0
    for piece in pieces:
        view[at : at + len(piece)] = piece
        at += len(piece)
    _direct_buffers.gathered = view
    return view


@contextmanager
def _in_aligned_buffer(data: bytes | memoryview, length: int) -> Iterator[memoryview]:
    """The first `length` bytes of `data` in this thread's aligned buffer: `data` itself
    when it is what this thread gathered last (the very object), else copied in."""
    if data is getattr(_direct_buffers, "gathered", None):
        assert isinstance(data, memoryview)
        yield data
        return
    with memoryview(_aligned_buffer(length)) as aligned:
        aligned[:length] = data[:length]
        yield aligned


def _aligned_buffer(size: int) -> mmap.mmap:
    """This thread's page-aligned buffer of at least `size` bytes (anonymous memory is
    page-aligned), kept for its next chunk: fresh memory costs page faults every time. A
    smaller one is dropped, not closed: a view of it may still be alive."""
    buffer: mmap.mmap | None = getattr(_direct_buffers, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _direct_buffers.buffer = mmap.mmap(-1, size)
    return buffer


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing the file's dirty pages out, without waiting: the
    fdatasync that follows then has less to wait for, and the files of a batch started
    together reach the disk in one journal commit instead of one each (Linux; elsewhere
    nothing happens here and each fdatasync does all the work)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


SYNC_FILE_RANGE_WRITE = 2
_sync_file_range = _libc_sync_file_range()


def read_at(fd: int, size: int, offset: int) -> bytes:
    pieces, left = [], size
    while left > 0:
        piece = os.pread(fd, min(left, 1 << 24), offset)
        if not piece:
            break
        pieces.append(piece)
        offset += len(piece)
        left -= len(piece)
    return b"".join(pieces)


def offset_mismatch(path: str, size: int) -> OffsetMismatch:
    return OffsetMismatch(
        f"{path} holds {size} bytes on the server; send the chunk that starts at offset {size} "
        "(Upload-Offset says it too)",
        offset=size,
    )


def unsafe(exc: OSError, path: str) -> Exception:
    if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
        return UnsafePath(f"{path} is a symlink, directory or device in the run; not writing it")
    return exc


def is_dir(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def unlink_quietly(dir_fd: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
