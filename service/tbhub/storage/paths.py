"""Paths inside the storage root. Every path is resolved and checked before use."""

from __future__ import annotations

from pathlib import Path

from tbhub.errors import UnsafePath
from tbhub.names import check_project_name


def inside_root(root: Path, candidate: Path) -> Path:
    """`candidate` resolved (symlinks followed); refused unless it stays under `root`."""
    real_root = root.resolve()
    real = candidate.resolve()
    if real != real_root and real_root not in real.parents:
        raise UnsafePath(f"{candidate} resolves outside the storage root {real_root}; refusing")
    return real


def project_dir(root: Path, project: str) -> Path:
    """`<root>/<project>`, refused if the project name is no slug or the path escapes the root."""
    check_project_name(project)
    path = root / project
    inside_root(root, path)
    return path
