"""Signed session cookies: `<payload>.<hmac>`. Verifying the signature touches no database;
the session id a cookie carries is then checked against its row (auth/user_sessions.py), so
signing out ends it on the server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tbhub.core.errors import AmbiguousSession

SESSION_COOKIE = "tbhub_session"


@dataclass(frozen=True)
class CookieNames:
    """tbhub's cookies. Behind TLS they carry the `__Host-` prefix: browsers then accept them
    only with Secure, Path=/ and no Domain, so no sibling host can set or shadow them."""

    session: str = SESSION_COOKIE
    csrf: str = "tbhub_csrf"
    board: str = "tbhub_board"

    @classmethod
    def for_url(cls, public_url: str) -> CookieNames:
        if not public_url.startswith("https://"):
            return cls()
        return cls(*(f"__Host-{name}" for name in (SESSION_COOKIE, "tbhub_csrf", "tbhub_board")))


@dataclass(frozen=True)
class SessionData:
    user_id: int
    expires_at: int
    session_id: str  # the random id of its `user_sessions` row; signing out deletes the row
    epoch: int = 0  # the user's session epoch when it was issued; a raised epoch ends it


class Signer:
    """`<base64 JSON>.<HMAC>` values under a key derived for one purpose only. No "="
    padding, so a cookie value needs no quoting and reads back the same everywhere."""

    def __init__(self, secret_key: str, purpose: str) -> None:
        self._key = hashlib.sha256(f"{purpose}:".encode() + secret_key.encode()).digest()

    def _mac(self, payload: bytes) -> str:
        digest = hmac.new(self._key, payload, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def dump(self, data: dict[str, Any]) -> str:
        body = json.dumps(data, separators=(",", ":")).encode()
        payload = base64.urlsafe_b64encode(body).rstrip(b"=")
        return f"{payload.decode()}.{self._mac(payload)}"

    def load(self, value: str | None) -> dict[str, Any] | None:
        """The data, or None if the value is missing, malformed or forged."""
        if not value or value.count(".") != 1:
            return None
        payload, mac = value.split(".")
        if not hmac.compare_digest(mac, self._mac(payload.encode())):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


class SessionSigner:
    def __init__(self, secret_key: str, max_age: int) -> None:
        self._signer = Signer(secret_key, "tbhub-session")
        self.max_age = max_age

    def expiry(self, now: float | None = None, max_age: int | None = None) -> int:
        """When a session issued now with `max_age` (at most the signer's) ends."""
        lifetime = self.max_age if max_age is None else min(max_age, self.max_age)
        return int((now if now is not None else time.time()) + lifetime)

    def issue(
        self, user_id: int, now: float | None = None, *, session_id: str, epoch: int = 0,
        max_age: int | None = None,
    ) -> str:  # fmt: skip
        expires_at = self.expiry(now, max_age)
        return self._signer.dump({"u": user_id, "e": expires_at, "v": epoch, "s": session_id})

    def verify(self, token: str | None, now: float | None = None) -> SessionData | None:
        """The session a cookie carries, or None if it is missing, forged or expired (or made
        before sessions had ids)."""
        body = self._signer.load(token)
        try:
            data = SessionData(
                user_id=int(body["u"]),  # type: ignore[index]
                expires_at=int(body["e"]),  # type: ignore[index]
                session_id=str(body["s"]),  # type: ignore[index]
                epoch=int(body.get("v", 0)),  # type: ignore[union-attr]
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if data.expires_at < (now if now is not None else time.time()):
            return None
        return data


def read_cookie(cookie_headers: Iterable[str], name: str) -> str | None:
    """The one cookie `name` in a request's Cookie header(s), or None if there is none.

    Parsers disagree on duplicates: nginx's `$cookie_` takes the first match of any case,
    Starlette the last exact one. Rather than pick a side, a request that carries the name
    twice (in one header or two) or in another case is refused, so whatever reads the
    cookie reads the same value.
    """
    found: list[tuple[str, str]] = []
    for header in cookie_headers:
        for chunk in header.split(";"):
            key, _, value = chunk.partition("=")
            key = key.strip()
            if key.lower() == name.lower():
                found.append((key, value.strip()))
    if not found:
        return None
    if len(found) > 1 or found[0][0] != name:
        raise AmbiguousSession(
            f"the request carries more than one {name} cookie (or one spelled in another "
            "case), which another site may have planted; clear this site's cookies in your "
            "browser and sign in again"
        )
    return found[0][1] or None


def read_session_cookie(cookie_headers: Iterable[str], name: str = SESSION_COOKIE) -> str | None:
    return read_cookie(cookie_headers, name)
