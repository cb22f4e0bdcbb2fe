"""Symlinks inside a project that lead out of it.

TensorBoard's data server follows symlinks when it walks a logdir, so a link in project A
to a run of project B (or to anywhere else) would show B's data on A's board. tbhub
refuses to serve a project that holds such a link: the supervisor checks before every
start and every `LINK_CHECK_SECONDS` while the board runs, and stops the board when one
appears. Links that stay inside the project are fine.
"""

from __future__ import annotations

import os
from pathlib import Path

# How often a running board's project is checked again; TensorBoard re-reads every 30 s
# and walks the whole tree each time, so a check costs about what one reload does.
LINK_CHECK_SECONDS = 30.0


def first_outside_link(project: Path) -> str | None:
    """A description of the first symlink under `project` that resolves outside it, if any.

    Walks without following links (os.scandir entries are never followed)."""
    try:
        root = project.resolve(strict=True)
    except OSError:
        return None
    stack = [str(project)]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                target = Path(os.path.realpath(entry.path))
                if target != root and root not in target.parents:
                    relative = os.path.relpath(entry.path, project)
                    return f"{relative} -> {os.readlink(entry.path)}"
            elif entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return None
