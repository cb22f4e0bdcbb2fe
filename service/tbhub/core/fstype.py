"""Which filesystem a path lives on, from /proc/self/mounts (Linux)."""

from __future__ import annotations

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


def is_network_filesystem(path: Path, mounts_file: Path = Path("/proc/self/mounts")) -> bool:
    fs_type = filesystem_type(path, mounts_file)
    return fs_type in NETWORK_FILESYSTEMS or fs_type.startswith("fuse")
