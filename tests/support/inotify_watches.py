"""The inodes a process's inotify instances watch, as the kernel lists them in
/proc/<pid>/fdinfo: what a test asks to know whether a directory is watched, without asking
the watcher."""

from __future__ import annotations

import os
import re
from pathlib import Path

import psutil

WATCH_LINE = re.compile(r"inotify wd:\S+ ino:([0-9a-f]+)")


def watched_inodes(pid: int, *, children: bool = False) -> set[int]:
    """Every inode the inotify instances of `pid` (and of its children) watch."""
    processes = [pid]
    if children:
        processes += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    inodes: set[int] = set()
    for process in processes:
        try:
            fds = os.listdir(f"/proc/{process}/fdinfo")
        except OSError:  # gone meanwhile
            continue
        for fd in fds:
            try:
                text = Path(f"/proc/{process}/fdinfo/{fd}").read_text()
            except OSError:
                continue
            inodes |= {int(ino, 16) for ino in WATCH_LINE.findall(text)}
    return inodes


def directory_inodes(root: Path) -> set[int]:
    """The inodes of `root` and of every directory below it."""
    return {root.stat().st_ino} | {p.stat().st_ino for p in root.rglob("*") if p.is_dir()}
