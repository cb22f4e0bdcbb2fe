"""Sessions kept on the server: each sign-in is a row, and its cookie carries the row's id.

The cookie stays a signed value (auth/sessions.py) and names a random session id, stored
only as its SHA-256. Signing out deletes the row: a copy of the cookie, and every board
cookie made from it (own-origin mode), is refused from then on. Sign out everywhere, a new
password and disabling the account delete all the user's rows (and raise the session epoch);
deleting the user deletes them through the foreign key.

The API and the pages read the row on every request. The auth hook reads it through
LiveSessions: this process forgets a session at once when it ends here; other processes
(another replica, the admin CLI) within SESSION_CACHE_SECONDS, plus nginx's short cache of
"let in" answers.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.sessions import SessionData
from tbhub.auth.ttl_cache import read_through
from tbhub.core.cache_generations import Generation
from tbhub.core.models import UserSession

SESSION_CACHE_SECONDS = 10.0


def id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def start_session(session: Session, *, user_id: int, expires_at: int) -> str:
    """A new session's id (its row added); expired rows of anyone go at the same time."""
    now = datetime.now(UTC)
    session.execute(delete(UserSession).where(UserSession.expires_at < now))
    session_id = secrets.token_urlsafe(32)
    session.add(UserSession(id_hash=id_hash(session_id), user_id=user_id,
                            expires_at=datetime.fromtimestamp(expires_at, UTC)))  # fmt: skip
    session.flush()
    return session_id


def end_session(session: Session, session_id: str) -> None:
    session.execute(delete(UserSession).where(UserSession.id_hash == id_hash(session_id)))


def end_user_sessions(session: Session, *, user_id: int) -> None:
    session.execute(delete(UserSession).where(UserSession.user_id == user_id))


@dataclass(frozen=True)
class Live:
    user_id: int
    expires_at: datetime


def live_session(session: Session, session_id: str) -> Live | None:
    row = session.get(UserSession, id_hash(session_id))
    return Live(row.user_id, row.expires_at) if row is not None else None


def is_live(found: Live | None, data: SessionData) -> bool:
    """Whether a cookie's session still has its row, for the same user, and has not ended."""
    return (
        found is not None and found.user_id == data.user_id and found.expires_at > datetime.now(UTC)
    )


class LiveSessions:
    """session id -> its row (None: none) for `ttl` seconds, for the auth hook."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = SESSION_CACHE_SECONDS,
        generation: Generation | None = None,
    ):
        self._cache = read_through(
            factory, live_session, ttl=ttl, name="session", generation=generation
        )

    def is_live(self, data: SessionData) -> bool:
        return is_live(self._cache.get(data.session_id), data)

    def invalidate(self) -> None:
        self._cache.invalidate()
