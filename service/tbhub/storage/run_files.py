"""The files of one run, walked by directory descriptor without following symlinks (DESIGN.md
decision 9): the run page lists them, the sparkline reader reads its event files."""

from __future__ import annotations

import os
import stat
from collections.abc import Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import UnsafePath
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
    """Up to `limit` files of the run, and whether there were more; none if it is gone."""
    files: list[RunFile] = []
    try:
        with (
            opened_run(storage_root, project, run_path) as fd,
            closing(walk_files(fd, max_depth=8)) as walk,
        ):
            for path, _parent, _name, st in walk:
                if len(files) == limit:
                    return files, True
                files.append(RunFile(path, st.st_size, st.st_mtime))
    except (OSError, UnsafePath):  # gone, or a symlink where the run should be
        return [], False
    return files, False
