"""Which filesystem a path lives on, from /proc/self/mounts (Linux)."""

from __future__ import annotations

import errno
from pathlib import Path

NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "afs"}
)


def _unescape(field: str) -> str:
    # /proc/mounts escapes spaces and tabs as octal.
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def filesystem_type(path: Path, mounts_file: Path = Path("/proc/self/mounts")) -> str:
    """The type of the mount holding `path` (its longest mount-point prefix)."""
    target = path.resolve()
    best, best_type = "", "unknown"
    try:
        lines = mounts_file.read_text().splitlines()
    except OSError:
        return best_type
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point, fs_type = _unescape(fields[1]), fields[2]
        inside = target == Path(mount_point) or Path(mount_point) in target.parents
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fs_type
    return best_type


def _is_network_type(fs_type: str) -> bool:
    return fs_type in NETWORK_FILESYSTEMS or fs_type.startswith("fuse")


def is_network_filesystem(path: Path, mounts_file: Path = Path("/proc/self/mounts")) -> bool:
    return _is_network_type(filesystem_type(path, mounts_file))


def network_mounts_below(root: Path, mounts_file: Path = Path("/proc/self/mounts")) -> list[Path]:
    """Network filesystems mounted below `root` (a project's own NFS or sshfs mount under a
    local storage root, or one deeper in a project), from the mount table alone: nothing
    under them is read."""
    target = root.resolve()
    try:
        lines = mounts_file.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and _is_network_type(fields[2]):
            mount_point = Path(_unescape(fields[1]))
            if mount_point != target and mount_point.is_relative_to(target):
                found.append(mount_point)
    return sorted(set(found))


# What a read of a mount that went away fails with: the FUSE daemon gone (ENOTCONN), an NFS
# handle the server no longer knows (ESTALE), a soft mount's I/O error or timeout, a host
# out of reach. Each means "this storage cannot be read now", never "this is empty".
MOUNT_LOST_ERRNOS = frozenset(
    {errno.ENOTCONN, errno.ESTALE, errno.EIO, errno.ETIMEDOUT, errno.EHOSTDOWN,
     errno.EHOSTUNREACH, errno.ECONNABORTED, errno.ECONNRESET}
)  # fmt: skip


def is_mount_lost(exc: BaseException) -> bool:
    """Whether `exc` says the storage's mount is unreachable (dropped, stale or timed out),
    as opposed to a path that is simply missing or forbidden."""
    if isinstance(exc, TimeoutError):
        return True
    return isinstance(exc, OSError) and exc.errno in MOUNT_LOST_ERRNOS
