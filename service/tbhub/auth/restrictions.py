"""project id -> its dashboard restriction, for the auth hook's hot path (a short-TTL cache)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.ttl_cache import TtlCache, read_through
from tbhub.core.cache_generations import Generation
from tbhub.core.models import BoardSettings
from tbhub.domain.dashboards import DEFAULT_AUDIENCE, NO_RESTRICTION, Restriction

# Like the AccessCache: a change made through this process shows at once, one made elsewhere
# (the admin CLI, another replica) within this.
RESTRICTION_CACHE_SECONDS = 10.0


def load_restriction(session: Session, project_id: int) -> Restriction:
    own = session.get(BoardSettings, project_id)
    if own is None or not own.restricted_dashboards:
        return NO_RESTRICTION
    return Restriction(frozenset(own.restricted_dashboards),
                       own.restricted_audience or DEFAULT_AUDIENCE)  # fmt: skip


class RestrictionCache:
    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = RESTRICTION_CACHE_SECONDS,
        generation: Generation | None = None,
    ) -> None:
        self._cache: TtlCache[int, Restriction] = read_through(
            factory, load_restriction, ttl=ttl, name="restriction", generation=generation
        )

    def lookup(self, project_id: int) -> Restriction:
        return self._cache.get(project_id)

    def invalidate(self) -> None:
        self._cache.invalidate()
