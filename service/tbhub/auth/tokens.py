"""API tokens: `tbh_` + 256 random bits, stored only as a SHA-256, scoped to projects.

A token acts for the user who owns it, never beyond that user's role and never beyond its
scope: `read` caps it at viewer, `write` at editor, in the projects it names and no others.
It never carries instance-admin or owner powers (DESIGN.md, security model).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session, selectinload, sessionmaker

from tbhub.auth.permissions import project_roles
from tbhub.auth.ttl_cache import TtlCache
from tbhub.core.cache_generations import Generation
from tbhub.core.db import transaction
from tbhub.core.errors import Forbidden, InvalidInput, NotAuthenticated, NotFound
from tbhub.core.models import ApiToken, Project, Role, TokenScope, User
from tbhub.core.names import checked_name, one_of
from tbhub.core.timestamps import iso_utc
from tbhub.domain import audit
from tbhub.domain.boards import AccessTracker

TOKEN_PREFIX = "tbh_"
TOKEN_SHAPE = re.compile(r"tbh_[A-Za-z0-9_-]{43}")
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._@:-]{0,63}")
MAX_TOKEN_PROJECTS = 100
MAX_TOKEN_DAYS = 3660
MIN_TOKEN_DAYS = 1 / 1440  # a minute
# The role a scope caps a token at.
SCOPE_ROLE = {TokenScope.read: Role.viewer, TokenScope.write: Role.editor}
MINT_HINT = "create one with `tbhub admin token create` or POST /api/v1/tokens, then `tbhub login`"


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """256 random bits need no slow hash: SHA-256 cannot be reversed to a usable token."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenGrant:
    """What a presented token allows, as read from the database."""

    token_id: int
    user_id: int
    user_name: str
    scope: TokenScope
    project_ids: frozenset[int]
    project_names: tuple[str, ...]
    expires_at: datetime | None
    revoked_at: datetime | None
    user_disabled: bool = False

    @property
    def cap(self) -> Role:
        return SCOPE_ROLE[self.scope]

    def check_usable(self, now: datetime) -> None:
        if self.user_disabled:
            raise NotAuthenticated(
                f"the account {self.user_name} is disabled, and so are its tokens; ask an "
                "instance admin to enable it (`tbhub admin user enable`)"
            )
        if self.revoked_at is not None:
            raise NotAuthenticated(
                f"this token was revoked at {iso_utc(self.revoked_at)}; {MINT_HINT}"
            )
        if self.expires_at is not None and self.expires_at <= now:
            raise NotAuthenticated(f"this token expired at {iso_utc(self.expires_at)}; {MINT_HINT}")


def grant_of(token: ApiToken) -> TokenGrant:
    projects = sorted(token.projects, key=lambda p: p.name)
    return TokenGrant(
        token_id=token.id,
        user_id=token.user_id,
        user_name=token.user.name,
        scope=token.scope,
        project_ids=frozenset(p.id for p in projects),
        project_names=tuple(p.name for p in projects),
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        user_disabled=token.user.disabled,
    )


def load_grant(session: Session, token_hash: str) -> TokenGrant | None:
    token = session.scalar(
        select(ApiToken)
        .where(ApiToken.token_hash == token_hash)
        .options(selectinload(ApiToken.projects), selectinload(ApiToken.user))
    )
    return grant_of(token) if token is not None else None


class TokenCache:
    """token hash -> TokenGrant for `ttl` seconds, so a job's requests do not each query the
    token. A revocation in any process of this server or by the admin CLI clears it at
    once (`generation`), in another replica through its NOTIFY; `ttl` bounds a change
    no notice reached (a notification lost while a listener reconnects). Last use is
    noted in memory and written in batches, at most every `flush_every` seconds, never once
    per request."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        ttl: float = 10.0,
        flush_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        generation: Generation | None = None,
    ) -> None:
        self._factory = factory
        self._flush_every = flush_every
        self._clock = clock
        # An unknown token is not kept: one minted in another process works at once.
        self._cache = TtlCache[str, TokenGrant | None](
            self._load, ttl=ttl, clock=clock, name="token", generation=generation,
            keep=lambda grant: grant is not None,
        )  # fmt: skip
        self.used = AccessTracker[int]()
        self._flushed_at = clock()

    def _load(self, key: str) -> TokenGrant | None:
        with self._factory() as session:
            return load_grant(session, key)

    def lookup(self, token: str) -> TokenGrant:
        """The grant of a presented token, or NotAuthenticated saying why it is refused."""
        if not TOKEN_SHAPE.fullmatch(token):
            raise NotAuthenticated(f"that is not a tbhub token (they start with tbh_); {MINT_HINT}")
        grant = self._cache.get(hash_token(token))
        if grant is None:
            raise NotAuthenticated(f"this token is not known to tbhub; {MINT_HINT}")
        grant.check_usable(datetime.now(UTC))
        self.used.touch(grant.token_id)
        if self._clock() - self._flushed_at >= self._flush_every:
            self.flush()
        return grant

    def invalidate(self) -> None:
        self._cache.invalidate()

    def flush(self) -> None:
        """Write the pending last-used times (a few rows, once a minute at most)."""
        self._flushed_at = self._clock()
        pending = self.used.drain()
        if not pending:
            return
        with transaction(self._factory) as session:
            for token_id, at in pending.items():
                session.execute(
                    update(ApiToken)
                    .where(ApiToken.id == token_id)
                    .where((ApiToken.last_used_at.is_(None)) | (ApiToken.last_used_at < at))
                    .values(last_used_at=at)
                )


# -- service functions: minting, listing, revoking ----------------------------------------


def check_token_name(name: str) -> str:
    return checked_name(
        TOKEN_NAME, name, "token", "is not allowed: use 1-64 letters, digits, spaces or "
        "'._@:-', starting with a letter or digit (for example 'ci-train')",
    )  # fmt: skip


def parse_scope(value: str) -> TokenScope:
    return one_of(TokenScope, value, "scope")


def expiry_from_days(days: float | None, now: datetime) -> datetime | None:
    if days is None:
        return None
    if not (MIN_TOKEN_DAYS <= days <= MAX_TOKEN_DAYS):
        raise InvalidInput(f"expiry must be between a minute and {MAX_TOKEN_DAYS} days")
    return now + timedelta(days=days)


def create_token(
    session: Session,
    *,
    user: User,
    name: str,
    scope: TokenScope,
    projects: list[str],
    expires_at: datetime | None,
    actor: str,
) -> tuple[ApiToken, str]:
    """Mint a token for `user`; returns the row and the secret, which is never stored.

    The user must already hold the role the scope gives in every project named: a token
    can narrow what its user may do, never widen it."""
    check_token_name(name)
    if not projects:
        raise InvalidInput("name at least one project the token may act on")
    if len(set(projects)) > MAX_TOKEN_PROJECTS:
        raise InvalidInput(f"a token may name at most {MAX_TOKEN_PROJECTS} projects")
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise InvalidInput("the expiry is in the past; give a time in the future")
    rows = list(session.scalars(select(Project).where(Project.name.in_(set(projects)))))
    missing = sorted(set(projects) - {p.name for p in rows})
    if missing:
        raise NotFound(
            f"no project named {', '.join(missing)}; list yours with GET /api/v1/projects"
        )
    need = SCOPE_ROLE[scope]
    if not user.is_admin:
        roles = project_roles(session, user_id=user.id)  # own or through a team
        unseen = sorted(p.name for p in rows if p.id not in roles)
        if unseen:  # the same answer as for a project that does not exist
            raise NotFound(f"no project named {', '.join(unseen)} that you can see; list yours "
                           "with GET /api/v1/projects")  # fmt: skip
        short = sorted(p.name for p in rows if roles[p.id].rank < need.rank)
        if short:
            raise Forbidden(
                f"{user.name} is not at least {need.value} of {', '.join(short)}, so a "
                f"{scope.value} token cannot act there; ask a project owner for that role or "
                "drop those projects"
            )
    secret = new_secret()
    token = ApiToken(
        user_id=user.id,
        name=name,
        token_hash=hash_token(secret),
        hint=secret[:12],
        scope=scope,
        created_by=actor,
        expires_at=expires_at,
        projects=rows,
    )
    session.add(token)
    session.flush()
    audit.record(
        session,
        actor=actor,
        action="token.create",
        target=f"token:{token.id}",
        user=user.name,
        scope=scope.value,
        projects=sorted(p.name for p in rows),
    )
    return token, secret


def token_query(*, user_id: int | None = None, project_id: int | None = None) -> Select[ApiToken]:
    query = (
        select(ApiToken)
        .options(selectinload(ApiToken.projects), selectinload(ApiToken.user))
        .order_by(ApiToken.id)
    )
    if user_id is not None:
        query = query.where(ApiToken.user_id == user_id)
    if project_id is not None:
        query = query.where(ApiToken.projects.any(Project.id == project_id))
    return query


def list_tokens(
    session: Session, *, user_id: int | None = None, project_id: int | None = None
) -> list[ApiToken]:
    return list(session.scalars(token_query(user_id=user_id, project_id=project_id)))


def get_token(session: Session, token_id: int) -> ApiToken:
    token = session.scalar(token_query().where(ApiToken.id == token_id))
    if token is None:
        raise NotFound(f"no token with id {token_id}; list tokens to find its id")
    return token


def revoke_token(session: Session, *, token: ApiToken, actor: str) -> ApiToken:
    """Revoke once; revoking again changes nothing and keeps the first time."""
    if token.revoked_at is None:
        token.revoked_at = datetime.now(UTC)
        audit.record(session, actor=actor, action="token.revoke", target=f"token:{token.id}")
    session.flush()
    return token


def token_state(token: ApiToken, now: datetime) -> str:
    if token.revoked_at is not None:
        return "revoked"
    return "expired" if token.expires_at is not None and token.expires_at <= now else "active"


def token_summary(token: ApiToken, now: datetime | None = None) -> dict[str, Any]:
    """A token as shown to people: never the secret, only its first characters."""
    return {
        "id": token.id,
        "name": token.name,
        "user": token.user.name,
        "hint": token.hint,
        "scope": token.scope.value,
        "projects": sorted(p.name for p in token.projects),
        "state": token_state(token, now or datetime.now(UTC)),
        "created_at": iso_utc(token.created_at),
        "expires_at": iso_utc(token.expires_at),
        "revoked_at": iso_utc(token.revoked_at),
        "last_used_at": iso_utc(token.last_used_at),
    }
