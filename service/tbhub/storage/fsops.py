"""Filesystem steps that a swapped-in symlink cannot redirect.

Every path is walked one component at a time from an open directory with O_NOFOLLOW, moves
are `renameat` between directory descriptors, and deletion is `shutil.rmtree(dir_fd=...)`,
which refuses symlinks and walks by descriptor too (DESIGN.md decisions 9 and 10).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tbhub.core.bounds import RUN_PATH_MAX
from tbhub.core.errors import ConfigError, InvalidInput, UnsafePath

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def require_safe_rmtree() -> None:
    if not shutil.rmtree.avoids_symlink_attacks:
        raise ConfigError(
            "this platform's shutil.rmtree can be redirected by a symlink swapped in mid-run, "
            "so tbhub refuses to delete anything; run it on Linux with Python 3.11+"
        )


def split_relative(path: str) -> list[str]:
    """'a/b/c' -> ['a', 'b', 'c']; refuses absolute paths, '.', '..' and empty parts."""
    parts = path.split("/")
    if len(path) > RUN_PATH_MAX:
        raise InvalidInput(f"a run path has at most {RUN_PATH_MAX} characters, not {len(path)}")
    if not path or path.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise InvalidInput(
            f"run path {path!r} must be relative to its project, like 'group/run-1', "
            "without '.', '..' or empty parts"
        )
    return parts


def open_dir(path: Path) -> int:
    """Open a configured root (a symlink in the configured path itself is fine)."""
    try:
        return os.open(path.resolve(), DIR_FLAGS)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; create it or fix the setting") from None


def open_below(
    dir_fd: int, parts: list[str], *, create: bool = False, durable: bool = False
) -> int:
    """Descend `parts` from `dir_fd` without following any symlink; a new fd to close.
    `durable`: a directory this makes is on disk in its parent before this returns."""
    if not parts:
        return os.dup(dir_fd)
    fd = dir_fd  # not ours to close until the first step is taken
    try:
        for part in parts:
            if create:
                with suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if durable:
                        os.fsync(fd)
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(
                        f"{'/'.join(parts)}: {part!r} is a symlink or not a directory; "
                        "refusing to follow it"
                    ) from None
                raise
            if fd != dir_fd:
                os.close(fd)
            fd = child
        return fd
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise


@contextmanager
def parent_of(root: Path, parts: list[str], *, create: bool = False) -> Iterator[int]:
    """The fd of the directory holding `parts[-1]` under `root`, walked without symlinks."""
    root_fd = open_dir(root)
    try:
        fd = open_below(root_fd, parts[:-1], create=create)
    finally:
        os.close(root_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def is_real_dir(dir_fd: int, name: str) -> bool:
    """True for a directory; False when missing; UnsafePath for a symlink or anything else."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{name!r} is a symlink or not a directory; refusing to touch it")
    return True


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def move(src_fd: int, src_name: str, dst_fd: int, dst_name: str) -> None:
    """One atomic rename between directories; never replaces what is already there."""
    if exists(dst_fd, dst_name):
        raise FileExistsError(errno.EEXIST, "already exists", dst_name)
    try:
        os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise ConfigError(
                "the trash and the storage root are on different filesystems, so a run cannot "
                "be moved by rename; set TBHUB_TRASH_ROOT to a directory on the storage "
                "filesystem (the default <storage_root>/.tbhub-trash is)"
            ) from None
        raise


def remove_tree(dir_fd: int, name: str) -> None:
    """Delete `name` in `dir_fd` and everything below it, by descriptor; missing is fine."""
    require_safe_rmtree()
    with suppress(FileNotFoundError):
        shutil.rmtree(name, dir_fd=dir_fd)
