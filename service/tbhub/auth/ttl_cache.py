"""The short-lived caches the auth hook reads instead of the database on its hot path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.cache_generations import Generation, Generations
from tbhub.core.metrics import instruments

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lookups:
    """Counts one cache's hits and misses (tbhub_auth_cache_lookups_total{cache=...})."""

    def __init__(self, cache: str) -> None:
        counter = instruments().cache_lookups
        self.hit = counter.labels(cache, "hit").inc
        self.miss = counter.labels(cache, "miss").inc


def local_generation() -> Generation:
    """A generation of this process alone (a cache outside `tbhub serve`, tests)."""
    return Generations().of("access")


class TtlCache(Generic[K, V]):
    """key -> `load(key)` for `ttl` seconds, or until `generation` moves on (a change in any
    process of this server: core/cache_generations.py). Loads run outside the lock; a value
    loaded while the generation moved is answered but not kept. `keep(value)` says which
    values are kept at all. The cache is bounded by dropping everything rather than growing
    past `max_entries`."""

    def __init__(
        self,
        load: Callable[[K], V],
        *,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 100_000,
        name: str = "other",
        generation: Generation | None = None,
        keep: Callable[[V], bool] = lambda _value: True,
    ) -> None:
        self._load, self._ttl, self._clock, self._max = load, ttl, clock, max_entries
        self._keep = keep
        self.generation = generation or local_generation()
        self._lookups = Lookups(name)
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[float, V]] = {}
        self._seen = self.generation.current()

    def get(self, key: K) -> V:
        now = self._clock()
        seen = self.generation.current()
        with self._lock:
            if seen != self._seen:
                self._entries.clear()
                self._seen = seen
            hit = self._entries.get(key)
        if hit is not None and now - hit[0] < self._ttl:
            self._lookups.hit()
            return hit[1]
        self._lookups.miss()
        value = self._load(key)
        if not self._keep(value):
            return value
        with self._lock:
            if self.generation.current() != self._seen or seen != self._seen:
                return value  # a change committed while this was read: ask again next time
            if len(self._entries) > self._max:
                self._entries.clear()
            self._entries[key] = (now, value)
        return value

    def invalidate(self) -> None:
        """After a change has committed: every process of this server drops this cache."""
        self.generation.bump()


def read_through(
    factory: sessionmaker[Session],
    query: Callable[[Session, K], V],
    *,
    ttl: float,
    name: str,
    generation: Generation | None = None,
) -> TtlCache[K, V]:
    """A TtlCache that reads each key with `query` on a database session of its own."""

    def load(key: K) -> V:
        with factory() as session:
            return query(session, key)

    return TtlCache(load, ttl=ttl, name=name, generation=generation)
