"""Paths inside the storage root. Every path is resolved and checked before use.

The one rule for a project's directory (`open_project`, and `project_dir` on top of it):
it is a real directory directly under the storage root. A symlink (`p4 -> p2`), a file, or
a bind mount of part of the storage's own filesystem there (another project, say) is
refused with UnsafePath, so no board, registration, watcher, retention or restore reaches
another project's data through it. Boards, runs, the watcher and the jobs all ask here.
"""

from __future__ import annotations

import os
import stat
from contextlib import suppress
from pathlib import Path

from tbhub.core.errors import ConfigError, UnsafePath
from tbhub.core.names import PROJECT_SLUG, check_project_name
from tbhub.storage.fsops import DIR_FLAGS, open_below


def inside_root(root: Path, candidate: Path) -> Path:
    """`candidate` resolved (symlinks followed); refused unless it stays under `root`."""
    real_root = root.resolve()
    real = candidate.resolve()
    if real != real_root and real_root not in real.parents:
        raise UnsafePath(f"{candidate} resolves outside the storage root {real_root}; refusing")
    return real


def project_path(root: Path, project: str) -> Path:
    """`<root>/<project>` as a name only (the API shows it): no filesystem is read."""
    check_project_name(project)
    return root / project


def _mount_id(fd: int) -> int | None:
    """The id of the mount `fd` lies on (Linux fdinfo), None where the kernel does not say."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
            for line in info:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _refused(project: str, path: Path, what: str) -> UnsafePath:
    return UnsafePath(
        f"the directory of project {project} ({path}) {what}; tbhub serves, writes and backs "
        "up only a real directory directly under the storage root. Replace it with a real "
        "directory (move or copy the data into it)"
    )


def open_project(root: Path, project: str, *, create: bool = False) -> int:
    """An fd of the project's directory, which must obey the one rule (see the module doc).

    FileNotFoundError when it does not exist (unless `create`, which makes it)."""
    path = project_path(root, project)
    root_fd = os.open(root.resolve(), DIR_FLAGS)
    try:
        try:
            fd = open_below(root_fd, [project], create=create)
        except UnsafePath:
            kind = "is a symlink" if _is_link(root_fd, project) else "is not a directory"
            raise _refused(project, path, kind) from None
        try:
            if _bind_mounted(root_fd, fd):
                raise _refused(project, path, "is a bind mount of another directory of the storage")
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        os.close(root_fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _bind_mounted(root_fd: int, fd: int) -> bool:
    """The project directory is a mount of the storage root's own filesystem (so it shows
    some other directory of the storage). A filesystem of its own mounted there (a volume
    for one project) holds no other project's data and is fine."""
    if os.fstat(root_fd).st_dev != os.fstat(fd).st_dev:
        return False
    root_mount, mount = _mount_id(root_fd), _mount_id(fd)
    return root_mount is not None and root_mount != mount


def project_problem(root: Path, project: str) -> str | None:
    """Why the project's directory breaks the rule, or None (a missing one breaks none)."""
    try:
        project_dir(root, project)
    except UnsafePath as exc:
        return exc.message
    return None


def project_dir(root: Path, project: str) -> Path:
    """`<root>/<project>`, checked by the one rule (UnsafePath). A directory that does not
    exist yet passes: there is nothing to follow, and whoever creates it goes through
    `open_project(create=True)` or checks again."""
    path = project_path(root, project)
    with suppress(FileNotFoundError):
        os.close(open_project(root, project))
    return path


def run_dir(root: Path, project: str, path: str) -> Path:
    """`<root>/<project>/<path>` resolved; refused unless it stays inside the project."""
    base = project_dir(root, project).resolve()
    real = (base / path).resolve()
    if real != base and base not in real.parents:
        raise UnsafePath(
            f"the directory of run {project}/{path} leads outside its project (a symlink?); "
            "tbhub shows no data from outside a project"
        )
    return real


def beside_projects(storage: Path, configured: Path, setting: str, shows: str) -> Path:
    """A directory tbhub keeps next to the projects (trash, compare views): refused inside a
    project directory, whose board would show `shows`, or as the storage root itself."""
    root = configured.expanduser().absolute()
    real_storage = storage.resolve()
    resolved = root.resolve()
    if resolved == real_storage:
        raise ConfigError(f"{setting} cannot be the storage root itself")
    if resolved.is_relative_to(real_storage):
        first = resolved.relative_to(real_storage).parts[0]
        if PROJECT_SLUG.fullmatch(first):
            raise ConfigError(
                f"{setting} {root} is inside the project directory {real_storage / first}, "
                f"where its board would show {shows}; put it beside the projects"
            )
    return root
