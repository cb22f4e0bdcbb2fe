"""The files of one run, walked and opened by directory descriptor without following
symlinks (DESIGN.md decision 9): the run page and the API list them and serve them for
download, the sparkline reader reads its event files."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import InvalidInput, NameTooLong, NotFound, UnsafePath
from tbhub.core.fstype import is_mount_lost
from tbhub.core.upload_protocol import HIDDEN_SUFFIXES, MAX_PATH_BYTES
from tbhub.storage.fsops import DIR_FLAGS, open_below, split_relative
from tbhub.storage.paths import open_project


@contextmanager
def opened_run(storage_root: Path, project: str, run_path: str) -> Iterator[int]:
    """An fd of `<storage_root>/<project>/<run_path>`, reached without following symlinks
    below the project directory; OSError (ENOENT, ELOOP ...) when it is not there."""
    top = open_project(storage_root, project)
    try:
        fd = open_below(top, split_relative(run_path))
    finally:
        os.close(top)
    try:
        yield fd
    finally:
        os.close(fd)


def walk_files(
    dir_fd: int, *, max_depth: int, prefix: str = ""
) -> Generator[tuple[str, int, str, os.stat_result]]:
    """(path below `dir_fd`, parent fd, name, stat) of each regular file, by name, a
    directory's files before its subdirectories, at most `max_depth` levels down. The parent
    fd stays open until the walk moves on."""
    with os.scandir(dir_fd) as scanner:
        entries = sorted((e.name, e) for e in scanner)
    subdirs = []
    for name, entry in entries:
        if entry.is_dir(follow_symlinks=False):
            subdirs.append(name)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            yield prefix + name, dir_fd, name, st
    if max_depth <= 0:
        return
    for name in subdirs:
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:  # gone, or swapped for a symlink
            continue
        try:
            yield from walk_files(child, max_depth=max_depth - 1, prefix=f"{prefix}{name}/")
        finally:
            os.close(child)


@dataclass(frozen=True)
class RunFile:
    path: str  # inside the run directory
    bytes: int
    mtime: float


def list_run_files(
    storage_root: Path, project: str, run_path: str, *, limit: int = 500
) -> tuple[list[RunFile], bool]:
    """Up to `limit` files of the run, and whether there were more; none if it is gone.
    A lost mount (ENOTCONN, ESTALE, EIO) raises: it says nothing of what is there."""
    files: list[RunFile] = []
    try:
        with (
            opened_run(storage_root, project, run_path) as fd,
            closing(walk_files(fd, max_depth=8)) as walk,
        ):
            for path, _parent, name, st in walk:
                if is_internal(name):
                    continue
                if len(files) == limit:
                    return files, True
                files.append(RunFile(path, st.st_size, st.st_mtime))
    except OSError as exc:  # gone; but a lost mount is no proof of that
        if is_mount_lost(exc):
            raise
        return [], False
    except UnsafePath:  # a symlink where the run should be
        return [], False
    return files, False


def is_internal(name: str) -> bool:
    """tbhub's own file beside an upload in progress (`.<name>.tbhub-partial`, `-tail`): not
    one of the run's files yet, so neither listed nor served."""
    return name.startswith(".") and name.endswith(HIDDEN_SUFFIXES)


def check_file_path(raw: str) -> list[str]:
    """The parts of a file's path inside a run, or UnsafePath for one that could leave it."""
    if len(raw.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise NameTooLong(f"a file path has at most {MAX_PATH_BYTES} bytes; shorten it")
    parts = raw.split("/")
    if raw.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise UnsafePath(
            f"file path {raw!r} must be relative to the run, like 'train/hparams.yaml', "
            "without '.', '..', empty parts or a leading '/'; copy it from the run's file list"
        )
    return parts


@dataclass(frozen=True)
class OpenedFile:
    fd: int
    size: int
    mtime_ns: int
    inode: int


def open_run_file(storage_root: Path, project: str, run_path: str, file_path: str) -> OpenedFile:
    """A regular file of the run opened for reading (the caller closes `fd`), reached from the
    project's directory one part at a time with no symlink followed on the way or at the end.
    UnsafePath for a symlink, NotFound for nothing there, InvalidInput for a directory or
    anything but a regular file."""
    parts = check_file_path(file_path)
    if is_internal(parts[-1]):
        raise NotFound(f"{file_path} is not a file of this run (an upload in progress)")
    try:
        with opened_run(storage_root, project, run_path) as run_fd:
            parent = open_below(run_fd, parts[:-1])
            try:
                # O_NONBLOCK: opening a FIFO must not wait for a writer before it is refused.
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
                fd = os.open(parts[-1], flags, dir_fd=parent)
            finally:
                os.close(parent)
    except FileNotFoundError:
        raise NotFound(
            f"run {run_path} of {project} has no file {file_path}; list its files to see what "
            "it holds"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise NameTooLong(f"a name in {file_path[:80]!r}... is too long; shorten it") from None
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(
                f"{file_path} is a symlink (or below one); tbhub serves only files kept in "
                "the run's own directory"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InvalidInput(
            f"{file_path} is {what}; download the regular files it holds, one at a time"
        )
    return OpenedFile(fd=fd, size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino)
