"""Checksum manifests in `sha256sum` format, so `sha256sum -c` can check them too.

A name holding a backslash or a newline is escaped the way GNU coreutils does it: the line
starts with a backslash and the name has `\\\\` and `\\n` in it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator

CHUNK = 1 << 20


def format_line(digest: str, path: str) -> str:
    if "\\" in path or "\n" in path:
        return "\\" + digest + "  " + path.replace("\\", "\\\\").replace("\n", "\\n") + "\n"
    return f"{digest}  {path}\n"


def format_manifest(entries: Iterable[tuple[str, str]]) -> str:
    """(path, digest) pairs, sorted by path, as manifest text."""
    return "".join(
        format_line(digest, path) if "\\" in path or "\n" in path else f"{digest}  {path}\n"
        for path, digest in sorted(entries)
    )


def parse_lines(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(path, digest) from `sha256sum` output lines (a leading '*' binary marker is fine)."""
    for raw in lines:
        line = raw.rstrip("\n")
        if not line:
            continue
        if line[64:66] == "  " and line[0] != "\\":  # the common case, quickly
            yield line[66:], line[:64]
            continue
        escaped = line.startswith("\\")
        if escaped:
            line = line[1:]
        digest, _, path = line.partition(" ")
        path = path[1:] if path[:1] in (" ", "*") else path
        if escaped:
            path = _unescape(path)
        yield path, digest


def _unescape(path: str) -> str:
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and i + 1 < len(path):
            out.append("\n" if path[i + 1] == "n" else path[i + 1])
            i += 2
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def hash_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


def walk_files(dir_fd: int) -> Iterator[tuple[str, int, str]]:
    """(relative path, parent dir fd, name) of every regular file below `dir_fd`, by
    descriptor and without following symlinks. The fds are valid until the next item."""
    for dirpath, _dirs, files, fd in os.fwalk(".", dir_fd=dir_fd):
        prefix = "" if dirpath == "." else dirpath[2:] + "/"
        for name in files:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield prefix + name, fd, name


def hash_tree(dir_fd: int) -> dict[str, str]:
    """path -> sha256 of every regular file below `dir_fd`."""
    return {rel: hash_at(fd, name) for rel, fd, name in walk_files(dir_fd)}


def compare(expected: dict[str, str], actual: dict[str, str]) -> list[dict[str, str]]:
    """Every difference, sorted by path: changed, missing (in manifest only), extra."""
    problems = []
    for path in sorted(expected.keys() | actual.keys()):
        want, got = expected.get(path), actual.get(path)
        if want == got:
            continue
        kind = "missing" if got is None else "extra" if want is None else "changed"
        problems.append({"path": path, "problem": kind})
    return problems
