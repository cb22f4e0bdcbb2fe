"""Who may open a compare board: whoever may read every one of its runs.

Runs have no access rules of their own: reading a run is reading its project. So opening a
compare board takes read access to each project its runs come from, checked for every
uncached board request like a project board's (the AccessCache's 10 s). A user who loses
any one of those projects can no longer open the board within that time. Share links are
for one project's board and never open a compare board. A saved view's board
(domain/views.py) shows runs of one project and takes read access to that project.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.permissions import AccessCache
from tbhub.auth.ttl_cache import TtlCache
from tbhub.core.cache_generations import Generation
from tbhub.core.models import CompareBoard, CompareRun, Project, Run, SavedView
from tbhub.core.names import is_compare_slug


@dataclass(frozen=True)
class CompareEntry:
    compare_id: int
    owner_id: int
    projects: frozenset[str]  # every project a run of the board belongs to


def load_entry(session: Session, slug: str) -> CompareEntry | None:
    board = session.execute(
        select(CompareBoard.id, CompareBoard.owner_id).where(CompareBoard.slug == slug)
    ).first()
    if board is None:
        return None
    projects = session.scalars(
        select(Project.name)
        .distinct()
        .join(Run, Run.project_id == Project.id)
        .join(CompareRun, CompareRun.run_id == Run.id)
        .where(CompareRun.compare_id == board.id)
    ).all()
    # A saved view's board reads its project, whatever runs it shows now (none at all too).
    view_project = session.scalars(
        select(Project.name)
        .join(SavedView, SavedView.project_id == Project.id)
        .where(SavedView.compare_id == board.id)
    ).all()
    return CompareEntry(board.id, board.owner_id, frozenset([*projects, *view_project]))


class CompareCache:
    """slug -> CompareEntry for `ttl` seconds; changes made through this process invalidate
    it at once."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        generation: Generation | None = None,
    ) -> None:
        self._factory = factory
        self._cache = TtlCache[str, CompareEntry | None](
            self._load, ttl=ttl, clock=clock, name="compare", generation=generation
        )

    def lookup(self, slug: str) -> CompareEntry | None:
        return self._cache.get(slug)

    def _load(self, slug: str) -> CompareEntry | None:
        with self._factory() as session:
            return load_entry(session, slug)

    def invalidate(self) -> None:
        self._cache.invalidate()


def board_projects(compares: CompareCache, name: str) -> frozenset[str] | None:
    """The projects whose read access opening board `name` takes: a project board's own
    project, every project of a compare board's runs; None for no such compare board (or
    one with no run left)."""
    if not is_compare_slug(name):
        return frozenset({name})
    entry = compares.lookup(name)
    return entry.projects if entry is not None and entry.projects else None


def may_open(access: AccessCache, compares: CompareCache, user_id: int, name: str) -> bool:
    """Whether a signed-in user may read board `name` (own-origin passes ask this)."""
    projects = board_projects(compares, name)
    return projects is not None and all(access.lookup(user_id, p).can_view for p in projects)
