"""Share links: a read-only way into one board for someone outside the project.

The link is `/share/<token>`; only the token's sha256 is stored. Opening it sets the cookie
`tbhub_share` with `Path=/boards/<project>/`, so the browser sends it to that board only,
never to the API, the UI or another board; the auth hook accepts it for that board only.
A revoked or expired link stops working within the cache lifetime here (10 s) plus nginx's
cache of "let in" answers (5 s).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.ttl_cache import TtlCache
from tbhub.core.cache_generations import Generation
from tbhub.core.errors import InvalidInput, NotFound
from tbhub.core.models import Project, ShareLink
from tbhub.core.timestamps import iso_utc
from tbhub.domain import audit
from tbhub.domain.projects import get_project

SHARE_COOKIE = "tbhub_share"
TOKEN_PREFIX = "tbs_"
TOKEN_LENGTH = len(TOKEN_PREFIX) + 43  # token_urlsafe(32)
MAX_DAYS = 365


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_link(
    session: Session, *, project: str, expires_in: timedelta, note: str | None, actor: str
) -> tuple[ShareLink, str]:
    """The new link and its token, which is shown this once and stored only as a hash."""
    if note is not None and len(note) > 255:
        raise InvalidInput(f"a note has at most 255 characters, not {len(note)}")
    row = get_project(session, name=project)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    link = ShareLink(
        token_hash=token_hash(token),
        project_id=row.id,
        created_by=actor,
        expires_at=datetime.now(UTC) + expires_in,
        note=note,
    )
    session.add(link)
    session.flush()
    audit.record(session, actor=actor, action="share.create", target=project, link=link.id,
                 expires_at=iso_utc(link.expires_at))  # fmt: skip
    return link, token


def list_links(session: Session, *, project: str) -> list[ShareLink]:
    row = get_project(session, name=project)
    query = select(ShareLink).where(ShareLink.project_id == row.id).order_by(ShareLink.id)
    return list(session.scalars(query))


def revoke_link(session: Session, *, project: str, link_id: int, actor: str) -> ShareLink:
    row = get_project(session, name=project)
    link = session.get(ShareLink, link_id)
    if link is None or link.project_id != row.id:
        raise NotFound(f"{project} has no share link {link_id}; list them first")
    if link.revoked_at is None:
        link.revoked_at = datetime.now(UTC)
        audit.record(session, actor=actor, action="share.revoke", target=project, link=link_id)
    session.flush()
    return link


def describe(link: ShareLink, now: datetime | None = None) -> dict[str, object]:
    now = now or datetime.now(UTC)
    state = "revoked" if link.revoked_at else ("expired" if link.expires_at <= now else "active")
    return {
        "id": link.id,
        "state": state,
        "created_by": link.created_by,
        "created_at": iso_utc(link.created_at),
        "expires_at": iso_utc(link.expires_at),
        "note": link.note,
    }


@dataclass(frozen=True)
class ShareGrant:
    link_id: int
    project_id: int
    project: str
    expires_at: float  # epoch seconds


class ShareLinkCache:
    """token hash -> the grant it gives (None: none), for `ttl` seconds; the hook's hot path
    reads no database for a link it has seen lately."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        generation: Generation | None = None,
    ) -> None:
        self._factory = factory
        self._cache = TtlCache[str, ShareGrant | None](
            self._load, ttl=ttl, clock=clock, name="share_link", generation=generation
        )

    def lookup(self, token: str) -> ShareGrant | None:
        if not token.startswith(TOKEN_PREFIX) or len(token) != TOKEN_LENGTH:
            return None
        grant = self._cache.get(token_hash(token))
        return grant if grant is not None and grant.expires_at > time.time() else None

    def _load(self, key: str) -> ShareGrant | None:
        with self._factory() as session:
            row = session.execute(
                select(ShareLink, Project.name)
                .join(Project, Project.id == ShareLink.project_id)
                .where(ShareLink.token_hash == key, ShareLink.revoked_at.is_(None))
            ).first()
        if row is None:
            return None
        link, project = row
        return ShareGrant(link.id, link.project_id, project, link.expires_at.timestamp())

    def invalidate(self) -> None:
        self._cache.invalidate()
