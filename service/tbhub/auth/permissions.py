"""Who may do what on a project, with a short-TTL cache for the auth hook's hot path."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.ttl_cache import TtlCache
from tbhub.core.cache_generations import Generation
from tbhub.core.models import Membership, Project, Role, TeamMember, TeamRole, User

# How long a role read from the database is trusted, at most: a change made through any
# process of the server or the admin CLI drops the cache at once (core/cache_generations.py),
# other replicas' on NOTIFY; this bounds a notification that was lost.
ACCESS_CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Access:
    """One user's standing towards one project name."""

    user_exists: bool  # False too for a disabled account: it gets in nowhere
    is_admin: bool
    project_id: int | None  # None: no such project
    role: Role | None  # the highest of the user's own role and their teams' roles
    session_epoch: int = 0  # sessions issued under an older epoch are over

    @property
    def can_view(self) -> bool:
        return (
            self.user_exists
            and self.project_id is not None
            and (self.is_admin or self.role is not None)
        )

    def at_least(self, role: Role) -> bool:
        if not self.user_exists or self.project_id is None:
            return False
        return self.is_admin or (self.role is not None and self.role.rank >= role.rank)


def project_roles(
    session: Session, *, user_id: int, project_id: int | None = None
) -> dict[int, Role]:
    """project id -> the user's highest role there, own or through a team."""
    own = select(Membership.project_id, Membership.role).where(Membership.user_id == user_id)
    teams = (
        select(TeamRole.project_id, TeamRole.role)
        .join(TeamMember, TeamMember.team_id == TeamRole.team_id)
        .where(TeamMember.user_id == user_id)
    )
    if project_id is not None:
        own = own.where(Membership.project_id == project_id)
        teams = teams.where(TeamRole.project_id == project_id)
    roles: dict[int, Role] = {}
    for pid, role in [*session.execute(own), *session.execute(teams)]:
        if pid not in roles or role.rank > roles[pid].rank:
            roles[pid] = role
    return roles


def load_access(session: Session, *, user_id: int, project: str) -> Access:
    user = session.get(User, user_id)
    if user is not None and user.disabled:
        user = None
    project_id = session.scalar(select(Project.id).where(Project.name == project))
    role = None
    if user is not None and project_id is not None:
        role = project_roles(session, user_id=user_id, project_id=project_id).get(project_id)
    return Access(
        user_exists=user is not None,
        is_admin=bool(user and user.is_admin),
        project_id=project_id,
        role=role,
        session_epoch=user.session_epoch if user is not None else 0,
    )


class AccessCache:
    """(user, project) -> Access for `ttl` seconds, or until its generation moves (a
    change anywhere on the server, the admin CLI's included, or another replica's NOTIFY)."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = ACCESS_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        generation: Generation | None = None,
    ) -> None:
        self._factory = factory
        self._cache = TtlCache[tuple[int, str], Access](
            self._load, ttl=ttl, clock=clock, name="access", generation=generation
        )

    def lookup(self, user_id: int, project: str) -> Access:
        return self._cache.get((user_id, project))

    def _load(self, key: tuple[int, str]) -> Access:
        with self._factory() as session:
            return load_access(session, user_id=key[0], project=key[1])

    def invalidate(self) -> None:
        self._cache.invalidate()


def readable_project_ids(
    session: Session, *, user_id: int, token_projects: frozenset[int] | None
) -> frozenset[int]:
    """The ids of every project the user may read (an admin: all of them), within the
    projects a token names when the caller came with one."""
    user = session.get(User, user_id)
    if user is None or user.disabled:
        return frozenset()
    if user.is_admin:
        ids = frozenset(session.scalars(select(Project.id)))
    else:
        ids = frozenset(project_roles(session, user_id=user_id))
    return ids if token_projects is None else ids & token_projects
