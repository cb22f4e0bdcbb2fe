"""The archive action: a run as a verified tar.gz with a sha256 manifest beside it."""

from __future__ import annotations

import hashlib
import os
import tarfile
import zlib
from pathlib import Path

from tbhub.core.errors import ArchiveFailed
from tbhub.housekeeping.manifest import CHUNK, format_manifest, walk_files
from tbhub.storage.fsops import DIR_FLAGS


class _HashingReader:
    """A file object over an fd that hashes what tarfile reads from it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = os.read(self.fd, size if size >= 0 else CHUNK)
        self.digest.update(data)
        return data


def archive_paths(archive_root: Path, project: str, entry_id: int, leaf: str) -> tuple[Path, Path]:
    base = archive_root / project / f"{entry_id}-{leaf}.tar.gz"
    return base, base.with_name(base.name + ".sha256")


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def write_archive(parent_fd: int, name: str, tarball: Path, manifest_path: Path) -> int:
    """Pack directory `name` (in `parent_fd`) into `tarball`, check the tarball against the
    checksums taken while packing, and only then put it and its manifest in place.
    Returns the tarball's size. Any failure (a full disk, a tarball that does not read back
    or does not match) raises ArchiveFailed and leaves no partial file behind."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    try:
        sums = _pack(parent_fd, name, partial_path(tarball))
        problems = verify_archive(partial_path(tarball), sums)
        if problems:
            raise ArchiveFailed(f"the tarball did not match its source: {problems[:5]}")
        with open(partial_path(tarball), "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(partial_path(tarball), tarball)
        partial_path(manifest_path).write_text(format_manifest(sums.items()))
        os.replace(partial_path(manifest_path), manifest_path)
    except Exception as exc:
        for path in (tarball, manifest_path):
            partial_path(path).unlink(missing_ok=True)
        tarball.unlink(missing_ok=True)  # never a tarball without its manifest
        detail = exc.message if isinstance(exc, ArchiveFailed) else f"{type(exc).__name__}: {exc}"
        raise ArchiveFailed(f"archive failed, run kept: {detail}") from exc
    return tarball.stat().st_size


def _pack(parent_fd: int, name: str, partial: Path) -> dict[str, str]:
    """Write the tar.gz; the sha256 of every file as it was read."""
    sums: dict[str, str] = {}
    run_fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        with tarfile.open(partial, "w:gz") as tar:
            for rel, fd, file_name in walk_files(run_fd):
                file_fd = os.open(file_name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    st = os.fstat(file_fd)
                    info = tarfile.TarInfo(f"{name}/{rel}")
                    info.size, info.mtime, info.mode = st.st_size, st.st_mtime, st.st_mode & 0o7777
                    reader = _HashingReader(file_fd)
                    tar.addfile(info, reader)  # type: ignore[arg-type]
                    sums[f"{name}/{rel}"] = reader.digest.hexdigest()
                finally:
                    os.close(file_fd)
    finally:
        os.close(run_fd)
    return sums


def verify_archive(tarball: Path, expected: dict[str, str]) -> list[str]:
    """Paths whose content in `tarball` differs from `expected` (or is missing or extra).
    A tarball that cannot be read back at all raises ArchiveFailed."""
    try:
        seen = _read_sums(tarball)
    except (tarfile.TarError, zlib.error, EOFError, OSError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise ArchiveFailed(f"the tarball does not read back ({detail})") from exc
    return sorted(p for p in expected.keys() | seen.keys() if expected.get(p) != seen.get(p))


def _read_sums(tarball: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            extracted = tar.extractfile(member)
            assert extracted is not None
            digest = hashlib.sha256()
            while chunk := extracted.read(CHUNK):
                digest.update(chunk)
            seen[member.name] = digest.hexdigest()
    return seen
