"""The extra plugins the control plane offers projects (`toggleable_plugins`), read from the
plugins' directory only when what that reading depends on changed: every board bar request
and every Board page asks, and reading them parses each distribution's metadata.

What is compared before each answer: the directory's identity (device, inode, mtime: `tbhub
admin plugins install` swaps in a new directory whole, and a distribution added or removed
changes the mtime) and, for each distribution in it, the identity (inode, mtime, size) of
the two files `board_process.extra_plugins` reads: its entry points and its metadata."""

from __future__ import annotations

import os
import threading

from tbhub.supervisor.board_process import extra_plugins

DIST_SUFFIXES = (".dist-info", ".egg-info")
READ_FILES = ("entry_points.txt", "METADATA", "PKG-INFO")  # what importlib.metadata reads

Identity = tuple[object, ...]


def directory_identity(path: str) -> Identity | None:
    """What `extra_plugins(path)` depends on; None when there is no such directory."""
    try:
        top = os.stat(path)
        with os.scandir(path) as entries:
            dists = sorted(e.name for e in entries if e.name.endswith(DIST_SUFFIXES))
    except (FileNotFoundError, NotADirectoryError):
        return None
    files: list[tuple[str, str, int, int, int]] = []
    for dist in dists:
        for name in READ_FILES:
            try:
                st = os.stat(os.path.join(path, dist, name))
            except OSError:
                continue
            files.append((dist, name, st.st_ino, st.st_mtime_ns, st.st_size))
    return (top.st_dev, top.st_ino, top.st_mtime_ns, tuple(files))


class PluginCatalog:
    """`extra_plugins` per directory, kept until that directory's identity changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, tuple[Identity | None, dict[str, str]]] = {}

    def extra_plugins(self, path: str) -> dict[str, str]:
        identity = directory_identity(path)
        with self._lock:
            known = self._known.get(path)
        if known is not None and known[0] == identity:
            return dict(known[1])
        found = extra_plugins(path) if identity is not None else {}
        with self._lock:
            self._known[path] = (identity, found)
        return dict(found)


CATALOG = PluginCatalog()  # the control plane's one; a process reads its directories once
