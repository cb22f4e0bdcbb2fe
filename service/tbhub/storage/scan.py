"""Find the runs under a project directory in one pass: size, file count and last write.

A run is a directory that directly holds event files (`events.out.tfevents.*`) or PyTorch
profiler traces (`*.pt.trace.json[.gz]`, where `torch.profiler.tensorboard_trace_handler`
writes them), a directory whose `plugins/profile/<session>/` holds such traces or XProf's
`*.xplane.pb` (the layout TensorFlow, JAX and XProf use: the run is the directory above
`plugins`), or a directory registered as a run through the API (`claimed`), whatever it
holds. A run owns
everything under its directory: a run nested inside another run belongs to the outer one,
because moving the outer directory moves it too. So a registered run whose event files sit
in `train/` and `val/` is one run with all their bytes, and an unregistered tree is one run
at its outermost directory that holds event files. Symlinks are neither followed nor
counted (DESIGN.md decision 9).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tbhub.core.errors import UnsafePath
from tbhub.core.fstype import is_mount_lost
from tbhub.core.processes import end_with_parent
from tbhub.storage.fsops import DIR_FLAGS, open_below

EVENT_FILE_PREFIX = "events.out.tfevents."
# Profiler traces make a run as event files do, but are no event files: the health monitor
# and the rewritten-file healer never see them. The torch profiler plugin's own pattern.
TORCH_TRACE = re.compile(r".+\.pt\.trace\.json(?:\.gz)?")
XPLANE_SUFFIX = ".xplane.pb"  # XProf's (TensorFlow, JAX): only under plugins/profile/<session>/
PROFILE_DIRS = ("plugins", "profile")  # <run>/plugins/profile/<session>/<trace>


@dataclass(frozen=True, slots=True)
class RunInfo:
    project: str
    path: str  # inside the project directory, '/'-separated, never '' or absolute
    bytes: int
    files: int
    last_write: float  # newest mtime of its files, epoch seconds (0.0 when it has none)


def is_trace(name: str) -> bool:
    """A profiler trace file's name (torch's or XProf's)."""
    return TORCH_TRACE.fullmatch(name) is not None or name.endswith(XPLANE_SUFFIX)


def profile_owner(rel: str) -> str | None:
    """The run a directory inside `<run>/plugins/profile/` belongs to (`<run>`), or None when
    `rel` is not in such a layout (or `plugins` sits right in the project directory)."""
    parts = rel.split("/")
    for i in range(1, len(parts) - 1):
        if (parts[i], parts[i + 1]) == PROFILE_DIRS:
            return "/".join(parts[:i])
    return None


def trace_run(rel: str, name: str) -> str | None:
    """The run that the trace file `name` in the directory `rel` makes, if it makes one."""
    owner = profile_owner(rel)
    if owner is not None:
        return owner
    return rel if TORCH_TRACE.fullmatch(name) else None


Claimed = frozenset[str]  # the paths of a project's registered runs
NONE_CLAIMED: Claimed = frozenset()


def scan_project(
    project_dir: str | os.PathLike[str], project: str, claimed: Claimed = NONE_CLAIMED
) -> list[RunInfo]:
    """Every run under `project_dir`, in no particular order. The project dir itself is
    never a run (its board would have nothing else), so event files right in it are ignored.

    The walk goes by directory descriptor: each stat is one `fstatat(dirfd, name)` rather than
    a lookup of the whole path, which is what keeps it near `find` on a million files."""
    runs: list[RunInfo] = []
    try:
        top = os.open(project_dir, DIR_FLAGS)
    except OSError as exc:  # gone, or a symlink (ELOOP): never walked
        _raise_if_mount_lost(exc)
        return runs
    try:
        with os.scandir(top) as scanner:
            subdirs = [e.name for e in scanner if e.is_dir(follow_symlinks=False)]
        for name in subdirs:
            _walk(top, name, name, project, runs, claimed)
    finally:
        os.close(top)
    return runs


def _walk(
    parent_fd: int,
    name: str,
    rel: str,
    project: str,
    runs: list[RunInfo],
    claimed: Claimed = NONE_CLAIMED,
    traced: set[str] | None = None,
) -> tuple[int, int, float]:
    """Totals (bytes, files, newest mtime) of the tree at `name`; appends the runs in it.
    `traced` gathers the runs that profiler traces below make, for the directories above
    (a trace in `<run>/plugins/profile/<session>/` makes `<run>` one)."""
    traced = set() if traced is None else traced
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        _raise_if_mount_lost(exc)
        return 0, 0, 0.0  # gone, swapped for a symlink (ELOOP) or unreadable
    total = count = 0
    newest = 0.0
    is_run = rel in claimed
    subdirs = []
    try:
        with os.scandir(fd) as scanner:
            for entry in scanner:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed while we looked
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                count += 1
                if st.st_mtime > newest:
                    newest = st.st_mtime
                if not is_run and entry.name.startswith(EVENT_FILE_PREFIX):
                    is_run = True
                elif is_trace(entry.name) and (owner := trace_run(rel, entry.name)) is not None:
                    traced.add(owner)
        mark = len(runs)
        for sub in subdirs:
            sub_bytes, sub_files, sub_newest = _walk(
                fd, sub, f"{rel}/{sub}", project, runs, claimed, traced
            )
            total += sub_bytes
            count += sub_files
            if sub_newest > newest:
                newest = sub_newest
    finally:
        os.close(fd)
    if is_run or rel in traced:
        del runs[mark:]  # runs nested in this one move with it
        runs.append(RunInfo(project, rel, total, count, newest))
    return total, count, newest


def scan_under(
    project_dir: str | os.PathLike[str], project: str, rel: str, claimed: Claimed = NONE_CLAIMED
) -> list[RunInfo]:
    """The runs at or below `rel` (a directory inside the project; '' is the whole project):
    the watcher's re-scan of one changed run or new subtree, by the same walk as above. The
    way to `rel` is opened one directory at a time without following symlinks, so a path that
    is gone, or that passes through a symlink (out of the project, say), holds no runs."""
    if not rel:
        return scan_project(project_dir, project, claimed)
    parts = rel.split("/")
    runs: list[RunInfo] = []
    try:
        top = os.open(project_dir, DIR_FLAGS)
    except OSError as exc:
        _raise_if_mount_lost(exc)
        return runs
    try:
        parent = open_below(top, parts[:-1])
    except UnsafePath:
        return runs
    except OSError as exc:
        _raise_if_mount_lost(exc)
        return runs
    finally:
        os.close(top)
    try:
        _walk(parent, parts[-1], rel, project, runs, claimed)
    finally:
        os.close(parent)
    return runs


def _raise_if_mount_lost(exc: OSError) -> None:
    """A lost mount (ENOTCONN, ESTALE, EIO) is no empty directory: a listing that met one is
    partial, and whoever reads it must not conclude that runs are gone."""
    if is_mount_lost(exc):
        raise exc


def measure_dir(parent_fd: int, name: str) -> tuple[int, int, float]:
    """(bytes, files, newest mtime) of the directory `name` in `parent_fd`, never following a
    symlink. Apply uses it to check, just before it acts, that a run is as planned."""
    return _walk(parent_fd, name, name, "", [])


ScanItem = tuple[str, str] | tuple[str, str, Claimed]  # (directory, project[, claimed])


def _scan_one(item: ScanItem) -> list[RunInfo] | None:
    try:
        return scan_project(*item)
    except OSError as exc:
        if is_mount_lost(exc):
            return None
        raise


def scan_projects(items: Sequence[ScanItem]) -> list[list[RunInfo] | None]:
    """scan_project for each (directory, project[, claimed]): None for a project whose
    listing met a lost mount part way (ENOTCONN, ESTALE, EIO), as its runs are unknown.
    In worker processes when there are
    several projects and CPUs. Threads do not help: the walk holds the GIL between stats.
    A single-threaded caller (the CLI) forks, which costs nothing; the server runs threads,
    so there the workers are spawned (they then import the server's modules once each)."""
    workers = min(len(items), os.cpu_count() or 1, 8)
    if workers < 2:
        return [_scan_one(item) for item in items]
    with worker_pool(workers) as pool:
        return list(pool.map(_scan_one, items))


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes that end with the process that made them. A pool's workers wait on
    a pipe whose write end they hold themselves, so without this a server killed mid-scan
    would leave them waiting forever."""
    forkable = threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if forkable else "spawn")
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=end_with_parent,
        initargs=(os.getpid(),),
    )
