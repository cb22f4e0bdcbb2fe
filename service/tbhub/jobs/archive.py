"""The archive action: a run as a verified tar.gz with a sha256 manifest beside it."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

from tbhub.jobs.fsops import DIR_FLAGS
from tbhub.jobs.manifest import CHUNK, format_manifest, walk_files


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


def write_archive(parent_fd: int, name: str, tarball: Path, manifest_path: Path) -> int:
    """Pack directory `name` (in `parent_fd`) into `tarball`, check the tarball against the
    checksums taken while packing, and only then put it and its manifest in place.
    Returns the tarball's size. Raises RuntimeError if the check fails."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(tarball.name + ".partial")
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
    problems = verify_archive(partial, sums)
    if problems:
        partial.unlink()
        raise RuntimeError(f"the archive {tarball} did not match its source: {problems[:5]}")
    with open(partial, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(partial, tarball)
    tmp = manifest_path.with_name(manifest_path.name + ".partial")
    tmp.write_text(format_manifest(sums.items()))
    os.replace(tmp, manifest_path)
    return tarball.stat().st_size


def verify_archive(tarball: Path, expected: dict[str, str]) -> list[str]:
    """Paths whose content in `tarball` differs from `expected` (or is missing or extra)."""
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
    return sorted(p for p in expected.keys() | seen.keys() if expected.get(p) != seen.get(p))
