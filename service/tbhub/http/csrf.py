"""Cross-site request forgery: every state-changing request made with a cookie carries a
token only tbhub can make, and none may come from another site.

- The token is an HMAC of the session cookie (or, before sign-in, of a random nonce cookie)
  under a key derived from the secret key. A planted cookie pair is worthless: the token
  is bound to the victim's own session, which no other site can read.
- Forms send it as the `csrf_token` field (checked by their handlers); JSON calls send it
  as the `X-CSRF-Token` header (`require_header_token`, checked wherever the session cookie
  authenticates an unsafe /api/ request: deps.signed_in_session). Pages get it rendered;
  scripts get it from `GET /api/v1/csrf`.
- Any POST/PUT/PATCH/DELETE whose `Origin` is not tbhub's own, or whose `Sec-Fetch-Site`
  is not `same-origin`/`none`, is refused, forms and sign-in included (CsrfGuard). A
  sibling subdomain is "same-site", and refused too.
- The credential that authenticates a call decides its rule, not the headers it carries: a
  call authenticated by an API token needs no CSRF token (a browser never adds a bearer
  header by itself), but any call the cookie authenticates needs one, whatever other
  `Authorization` header it also sends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from tbhub.auth.sessions import CookieNames, read_cookie, read_session_cookie
from tbhub.core.errors import AmbiguousSession, Forbidden
from tbhub.http.http_errors import error_response
from tbhub.http.public_url import MismatchLog, origin_hint

CSRF_HEADER = "x-csrf-token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAFE_FETCH_SITES = frozenset({"same-origin", "none"})


class CsrfFailed(Forbidden):
    code = "csrf_failed"


class CsrfTokens:
    def __init__(self, secret_key: str) -> None:
        self._key = hashlib.sha256(b"tbhub-csrf:" + secret_key.encode()).digest()

    def token(self, binding: str) -> str:
        digest = hmac.new(self._key, binding.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def valid(self, binding: str | None, token: str | None) -> bool:
        return bool(binding and token) and hmac.compare_digest(self.token(str(binding)),
                                                              str(token))  # fmt: skip


def new_nonce() -> str:
    return secrets.token_urlsafe(32)


def binding_of(request: Request, cookies: CookieNames) -> str | None:
    """What the request's token must be bound to: its session cookie, else its nonce cookie."""
    try:
        headers = request.headers.getlist("cookie")
        return read_session_cookie(headers, cookies.session) or read_cookie(headers, cookies.csrf)
    except AmbiguousSession:
        return None


def cross_site_reason(request: Request, public_url: str) -> str | None:
    """Why an unsafe request looks cross-site, or None if it does not."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in SAFE_FETCH_SITES:
        return f"the browser says it came from a {fetch_site} page"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    ours = {urlsplit(public_url)._replace(path="", query="", fragment="").geturl().rstrip("/")}
    host = request.headers.get("host")
    if origin == "null" or (origin not in ours and urlsplit(origin).netloc != host):
        return f"its Origin {origin[:100]} is not this site"
    return None


def require_header_token(request: Request, tokens: CsrfTokens, session_cookie: str) -> None:
    """Refuse an unsafe /api/ call that the session cookie `session_cookie` authenticates
    unless it carries that session's X-CSRF-Token (forms check their own field)."""
    if request.method not in UNSAFE_METHODS or not request.url.path.startswith("/api/"):
        return
    if not tokens.valid(session_cookie, request.headers.get(CSRF_HEADER)):
        raise CsrfFailed(
            "a call made with the session cookie needs the X-CSRF-Token header; get it "
            "from GET /api/v1/csrf, or call with an API token (Authorization: Bearer) instead"
        )


class CsrfGuard:
    """ASGI middleware: the Origin check for every unsafe request (the token is checked where
    the cookie authenticates the request: require_header_token)."""

    def __init__(self, app: ASGIApp, *, public_url: str) -> None:
        self.app, self.public_url = app, public_url
        self.mismatches = MismatchLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS:
            request = Request(scope)
            reason = cross_site_reason(request, self.public_url)
            if reason is not None:
                problem = f"refused: {reason}; submit it from tbhub's own pages"
                hint = origin_hint(request, self.public_url)
                if hint is not None:  # perhaps no attack: a public URL that is not this site
                    problem = f"{problem}; {hint}"
                    self.mismatches.note(request, self.public_url)
                response = error_response(request, 403, CsrfFailed.code, problem)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
