"""Paths inside the storage root. Every path is resolved and checked before use."""

from __future__ import annotations

from pathlib import Path

from tbhub.errors import ConfigError, UnsafePath
from tbhub.names import PROJECT_SLUG, check_project_name


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
