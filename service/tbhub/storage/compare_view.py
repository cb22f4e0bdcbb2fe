"""A compare board's logdir: a view of hard links to the event files of the runs compared.

A compare board shows runs of several projects with no symlink into any of them:
TensorBoard follows symlinks, and a link tree is a path from one place into another project.
Its logdir is `<compare_root>/<slug>/<project>/<run path>/...`, holding one hard link per
event file of each run. A hard link is the file itself (the same inode), so what a job
appends shows on the compare board at once, and TensorBoard names each run
`<project>/<run path>`: two `run-01`s of two projects stay apart.

- Only regular files whose names hold `tfevents` (what TensorBoard reads) are linked. Every
  directory is opened from the storage root's descriptor with O_NOFOLLOW, so no symlink is
  ever followed, and a link whose inode is not the file walked (swapped meanwhile) is
  removed again.
- A sync links new files (a writer that starts a new file, a new sub-run directory),
  relinks a file replaced by another (a new inode), and unlinks files that are gone (a run
  trashed): the view never keeps a removed run's bytes alive. The supervisor syncs before a
  compare board starts and every SYNC_SECONDS while it runs, and deletes the view once the
  board has stopped.
- Hard links need the storage filesystem (EXDEV otherwise: across NFS mounts too) and, with
  Linux's fs.protected_hardlinks=1, files tbhub's user owns or may write. Either failure is
  a ConfigError naming the fix; the supervisor then serves no board for the set.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import ConfigError, InvalidInput
from tbhub.core.names import COMPARE_SLUG, check_project_name
from tbhub.core.settings import Settings
from tbhub.core.upload_protocol import is_event_file
from tbhub.storage.fsops import DIR_FLAGS, open_below, open_dir, remove_tree, split_relative
from tbhub.storage.paths import beside_projects

COMPARE_DIR_NAME = ".tbhub-compare"  # not a project slug, so no project can ever be called that
# How often a running compare board's view is brought up to date with its runs.
SYNC_SECONDS = 10.0


@dataclass(frozen=True)
class ViewRun:
    """One run a view shows: its project and its directory inside the project."""

    project: str
    path: str


def compare_root(settings: Settings) -> Path:
    """Where the views live: beside the projects, never inside one."""
    configured = settings.compare_root or settings.storage / COMPARE_DIR_NAME
    return beside_projects(
        settings.storage, configured, "TBHUB_COMPARE_ROOT", "runs of other projects"
    )


def sync_view(storage_root: Path, root: Path, slug: str, runs: Iterable[ViewRun]) -> int:
    """Bring `<root>/<slug>/` up to date with the event files of `runs`; the files it holds.

    A run whose directory is missing (trashed, not written yet) is left out; one whose path
    passes through a symlink raises UnsafePath."""
    if not COMPARE_SLUG.fullmatch(slug):
        raise InvalidInput(f"{slug!r} is not a compare board's name")
    root.mkdir(parents=True, exist_ok=True)
    storage_fd = open_dir(storage_root)
    try:
        root_fd = open_dir(root)
        try:
            if os.fstat(storage_fd).st_dev != os.fstat(root_fd).st_dev:
                raise _other_filesystem(root, storage_root)
            view_fd = open_below(root_fd, [slug], create=True)
        finally:
            os.close(root_fd)
        try:
            kept: set[str] = set()
            for run in runs:
                parts = [check_project_name(run.project), *split_relative(run.path)]
                try:
                    source_fd = open_below(storage_fd, parts)
                except FileNotFoundError:
                    continue
                try:
                    _mirror(source_fd, view_fd, parts, kept)
                finally:
                    os.close(source_fd)
            _prune(view_fd, [], kept)
        finally:
            os.close(view_fd)
    finally:
        os.close(storage_fd)
    return len(kept)


def remove_views(root: Path, keep: Collection[str]) -> list[str]:
    """Delete every view under `root` not named in `keep`; the slugs removed."""
    if not root.is_dir():
        return []
    root_fd = open_dir(root)
    removed = []
    try:
        with os.scandir(root_fd) as entries:
            names = [e.name for e in entries if COMPARE_SLUG.fullmatch(e.name)]
        for name in names:
            if name not in keep:
                remove_tree(root_fd, name)
                removed.append(name)
    finally:
        os.close(root_fd)
    return removed


def _mirror(source_fd: int, view_fd: int, parts: list[str], kept: set[str]) -> None:
    """Link the event files under `source_fd` into the view at `parts`, recursively."""
    with os.scandir(source_fd) as scanner:
        entries = [(e.name, e.stat(follow_symlinks=False)) for e in scanner]
    target_fd: int | None = None  # created on the first event file: no empty directories
    try:
        for name, st in entries:
            if stat.S_ISDIR(st.st_mode):
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=source_fd)
                except OSError as exc:  # swapped for a symlink or removed since the listing
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        continue
                    raise
                try:
                    _mirror(child, view_fd, [*parts, name], kept)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode) and is_event_file(name):
                if target_fd is None:
                    target_fd = _view_dir(view_fd, parts)
                if _link(source_fd, target_fd, name, st):
                    kept.add("/".join([*parts, name]))
    finally:
        if target_fd is not None:
            os.close(target_fd)


def _view_dir(view_fd: int, parts: list[str]) -> int:
    """The view's directory at `parts`, made where missing; anything else there goes."""
    fd = os.dup(view_fd)
    try:
        for part in parts:
            _clear_unless(fd, part, stat.S_ISDIR)
            child = open_below(fd, [part], create=True)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _clear_unless(dir_fd: int, name: str, kind: Callable[[int], bool]) -> os.stat_result | None:
    """`name`'s stat if it is of `kind` (stat.S_ISDIR, S_ISREG); otherwise it is removed."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if kind(st.st_mode):
        return st
    if stat.S_ISDIR(st.st_mode):
        remove_tree(dir_fd, name)
    else:
        os.unlink(name, dir_fd=dir_fd)
    return None


def _link(source_fd: int, target_fd: int, name: str, source: os.stat_result) -> bool:
    """Hard-link `name` into the view unless it is there already. False if the file went
    away or was swapped before the link was made."""
    have = _clear_unless(target_fd, name, stat.S_ISREG)
    if have is not None:
        if _same_file(have, source):
            return True
        os.unlink(name, dir_fd=target_fd)  # the run's file was replaced: link the new one
    try:
        os.link(name, name, src_dir_fd=source_fd, dst_dir_fd=target_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise ConfigError(
                "a run and the compare root are on different filesystems (a project on a "
                "mount of its own?), so its event files cannot be hard-linked; set "
                "TBHUB_COMPARE_ROOT to a directory on that filesystem"
            ) from None
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise ConfigError(
                f"tbhub may not hard-link the event file {name!r}: with the kernel setting "
                "fs.protected_hardlinks=1 its user must own the files it links or be able to "
                "write them; give tbhub's group write access to the runs (or upload them "
                "through tbhub)"
            ) from None
        raise
    made = os.stat(name, dir_fd=target_fd, follow_symlinks=False)
    if stat.S_ISREG(made.st_mode) and _same_file(made, source):
        return True
    os.unlink(name, dir_fd=target_fd)
    return False


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _prune(dir_fd: int, parts: list[str], kept: set[str]) -> bool:
    """Remove what `kept` does not name below `dir_fd`; True when nothing is left there."""
    empty = True
    with os.scandir(dir_fd) as scanner:
        entries = [(e.name, e.stat(follow_symlinks=False)) for e in scanner]
    for name, st in entries:
        if stat.S_ISDIR(st.st_mode):
            child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            try:
                gone = _prune(child, [*parts, name], kept)
            finally:
                os.close(child)
            if gone:
                os.rmdir(name, dir_fd=dir_fd)
            else:
                empty = False
        elif "/".join([*parts, name]) in kept:
            empty = False
        else:
            os.unlink(name, dir_fd=dir_fd)
    return empty


def _other_filesystem(root: Path, storage_root: Path) -> ConfigError:
    return ConfigError(
        f"the compare root {root} is not on the storage root's filesystem ({storage_root}), "
        "so runs cannot be hard-linked into it; set TBHUB_COMPARE_ROOT to a directory on that "
        "filesystem (the default <storage_root>/.tbhub-compare is)"
    )
