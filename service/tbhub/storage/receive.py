"""One uploaded chunk, from checked bytes to the run directory: the digest, the room it needs
(the project's retention quota and the disk's free space), and the write itself.

On a network mount that is lost (ENOTCONN, ESTALE, EIO) or hung, every upload request
answers StorageUnavailable (503) instead of failing untyped or waiting with the mount.
Reading a file's state or the run's files runs whole in a thread of its own with a
bounded wait (storage/reach.py). A write does only its first step there, opening the run
directory (so a mount already hung is a bounded 503 with nothing written, and a hung
project holds a few threads, not the pool); the write itself stays in the request's
thread. Run as `within` runs a call, a write whose caller gave up would go on after its
503 and might still land, and its chunk would either be gathered in a fresh thread's
buffer every time (upload_io.gathered reuses one per thread) or be written from the buffer
the request's thread gathers its next chunk into. A mount lost during the write fails it
(the ledger settled, the file cut back to its end where the mount still lets it) as a
503; one that hangs during it holds that request until the mount answers or drops."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from tbhub.core.errors import InsufficientStorage
from tbhub.core.upload_protocol import check_digest, unpack_batch
from tbhub.storage import uploads
from tbhub.storage.fsops import open_below, split_relative
from tbhub.storage.paths import open_project
from tbhub.storage.reach import DEFAULT_WAIT, answered_if_lost, within
from tbhub.storage.upload_io import direct_length, gathered
from tbhub.storage.uploads import FileState
from tbhub.storage.usage import ProjectUsage

T = TypeVar("T")
# A bounded call of an upload is waited on by a request thread, and those are few (core/db):
# the request threads bound a burst, not reach's MAX_IN_FLIGHT, which healthy uploads of one
# project (8 files at once from each job) would pass.
IN_FLIGHT = 64
# The run's whole file list may take a while on a slow mount with many files: it waits
# longer than one file's state, and less than the client's 30 s before it gives up.
LIST_WAIT = 20.0


def unavailable_message(project: str) -> str:
    return (
        f"the storage of project {project} is not answering (its network mount may be hung "
        "or disconnected); the server keeps what it holds of the upload, and running the "
        "upload again once the mount is back resumes it from there"
    )


@dataclass(frozen=True)
class UploadTarget:
    """Where a chunk goes and what limits it: one run of one project."""

    storage_root: Path
    project: str
    run_path: str
    quota: int | None  # the project's retention max_project_bytes (None or 0: no quota)
    min_free: int  # bytes the storage filesystem must keep free
    usage: ProjectUsage

    def open_run(self, *, create: bool) -> int | None:
        """The run directory's fd (the caller closes it), walked from the storage root
        without symlinks; None when it does not exist (and `create` is off)."""
        parts = split_relative(self.run_path)
        try:
            project = open_project(self.storage_root, self.project, create=create)
        except FileNotFoundError:
            return None
        try:
            return open_below(project, parts, create=create, durable=create)
        except FileNotFoundError:
            return None
        finally:
            os.close(project)

    def reach(
        self,
        call: Callable[[], T],
        *,
        timeout: float = DEFAULT_WAIT,
        discard: Callable[[T], object] | None = None,
    ) -> T:
        """`call()` on the project's storage in a thread of its own: StorageUnavailable, saying
        how the upload goes on, when the mount is lost or does not answer within `timeout`."""
        return within(
            f"upload:{self.project}", call, timeout=timeout,
            message=self.unavailable, max_in_flight=IN_FLIGHT, discard=discard,
        )  # fmt: skip

    def unavailable(self, _key: str = "") -> str:
        return unavailable_message(self.project)

    def room(self) -> Room:
        return Room(self)


class Room:
    """The room one chunk needs, checked just before it is written (uploads.RoomCheck): its
    bytes let into the project's quota, when it has one, and the disk's free space kept.
    `settle` then tells the quota's ledger what the write added, whatever became of it."""

    def __init__(self, target: UploadTarget) -> None:
        self.target = target
        self.reserved = 0

    def __call__(self, dir_fd: int, size: int) -> None:
        target = self.target
        if target.quota:
            decision = target.usage.reserve(target.project, size, target.quota)
            if not decision.granted:
                raise InsufficientStorage(
                    f"project {target.project} holds {decision.used} bytes (with the uploads "
                    f"under way) and its retention quota is {target.quota}, so this "
                    f"{size}-byte chunk does not fit; nothing was written. Ask an owner to "
                    "raise max_project_bytes, or free space with `tbhub admin retention apply`"
                )
            self.reserved += size
        fs = os.fstatvfs(dir_fd)
        free = fs.f_bavail * fs.f_frsize
        if free - size < target.min_free:
            raise InsufficientStorage(
                f"the storage is full: it has {free} bytes free and keeps {target.min_free} "
                f"in reserve, so this {size}-byte chunk does not fit; nothing was written. "
                "Ask an operator to free space, then resume the upload"
            )

    def settle(self, written: int) -> None:
        if self.reserved:
            self.target.usage.settle(self.target.project, self.reserved, written)
            self.reserved = 0


@contextmanager
def _closing(fd: int | None) -> Iterator[int | None]:
    try:
        yield fd
    finally:
        _close(fd)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def file_state(target: UploadTarget, parts: list[str]) -> FileState:
    return target.reach(partial(_file_state, target, parts))


def _file_state(target: UploadTarget, parts: list[str]) -> FileState:
    with _closing(target.open_run(create=False)) as run_fd:
        if run_fd is None:
            return FileState("/".join(parts), 0, False, uploads.kind_of(parts[-1]))
        return uploads.file_state(run_fd, parts)


def list_files(target: UploadTarget) -> list[FileState]:
    return target.reach(partial(_list_files, target), timeout=LIST_WAIT)


def _list_files(target: UploadTarget) -> list[FileState]:
    with _closing(target.open_run(create=False)) as run_fd:
        return [] if run_fd is None else uploads.list_files(run_fd)


def receive_chunk(
    target: UploadTarget,
    parts: list[str],
    *,
    offset: int,
    pieces: list[bytes],
    sha256: bytes,
    complete: bool,
) -> FileState:
    """Check the chunk (the body's pieces, in order) against its digest, then write it;
    durable before this returns. A chunk that goes to the disk with O_DIRECT is put
    together in this thread's aligned buffer, so it is copied once and written from there
    (upload_io.gathered); any other is joined."""
    size = sum(map(len, pieces))
    data: bytes | memoryview
    if uploads.kind_of(parts[-1]) == "file" and direct_length(size, offset):
        data = gathered(pieces, size)
    else:
        data = b"".join(pieces)
    check_digest(sha256, hashlib.sha256(data).digest())
    return _write(target, [(parts, offset, data, complete)])[0]


def receive_batch(target: UploadTarget, body: bytes, *, sha256: bytes) -> list[FileState]:
    """A batch of whole files (a tar body, see core/upload_protocol.py), checked against its
    digest and read whole before anything is written, then each file written as a PUT of it
    would be, in order; all durable before this returns. A failure stops the batch: the
    files before it are whole under their names, the rest untouched."""
    check_digest(sha256, hashlib.sha256(body).digest())
    files = unpack_batch(body)
    return _write(target, [(parts, 0, data, True) for parts, data in files])


Chunk = tuple[list[str], int, bytes | memoryview, bool]  # path parts, offset, bytes, ends the file


def _write(target: UploadTarget, chunks: list[Chunk]) -> list[FileState]:
    """Each chunk written in order into the run. The whole files among them are made
    durable together (uploads.Finishing: written, then synced, then renamed, a group at a
    time; the directories fsynced once at the end), and on a failure too, for the files
    before it: a batch of small files costs a few journal commits, not one or two a file."""
    states = []
    run_fd = target.reach(partial(target.open_run, create=True), discard=_close)
    assert run_fd is not None
    with (
        answered_if_lost(target.project, target.unavailable),
        _closing(run_fd),
        uploads.OpenDirs(run_fd) as dirs,  # each directory walked once a request
    ):
        finishing = uploads.Finishing(dirs)
        try:
            for parts, offset, data, complete in chunks:
                before = uploads.file_state(run_fd, parts, dirs=dirs).offset
                room = target.room()
                try:
                    state = uploads.append_chunk(
                        run_fd, parts, offset=offset, data=data, complete=complete,
                        room=room, finishing=finishing, dirs=dirs,
                    )  # fmt: skip
                except BaseException:
                    if room.reserved:
                        room.settle(_grown(run_fd, parts, dirs, before, room.reserved))
                    raise
                room.settle(state.offset - before)
                target.usage.wrote(target.project, target.run_path)
                states.append(state)
        finally:
            finishing.finish()
    return states


def _grown(run_fd: int, parts: list[str], dirs: uploads.OpenDirs, before: int, unknown: int) -> int:
    """What a failed write left of its chunk in the file; `unknown` (all of it, counted on
    the safe side until the next walk) when the file cannot be read either."""
    try:
        return uploads.file_state(run_fd, parts, dirs=dirs).offset - before
    except Exception:  # the write's own error is the one to answer with
        return unknown
