"""Whether TBHUB_PUBLIC_URL is the address browsers use, said where an operator looks.

Behind a TLS site the browser's Origin is `https://<site>`; if tbhub still believes it is
`http://127.0.0.1:8080` (the default) and the site does not pass the Host through, every
form and sign-in is refused as cross-site. The refusal then says which TBHUB_PUBLIC_URL
would fix it, the log says so once per address, and `tbhub serve` warns at start-up about a
setting that is likely wrong.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

from starlette.requests import Request

from tbhub.core.settings import WILDCARD_HOSTS, Settings

log = logging.getLogger("tbhub")
LOGGED_ORIGINS_MAX = 16  # distinct addresses logged; a flood of forged ones stops there


def site_of(url: str) -> str:
    """`https://host[:port]` of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def startup_warning(settings: Settings) -> str | None:
    """What looks wrong about the public URL before any request came."""
    explicit = "public_url" in settings.model_fields_set
    fix = "set TBHUB_PUBLIC_URL to the address browsers open (e.g. https://tbhub.example.com)"
    if not explicit and (settings.http_host in WILDCARD_HOSTS or settings.trusted_proxies):
        return (
            f"TBHUB_PUBLIC_URL is not set, so tbhub takes {settings.public_url} for its own "
            f"address; if browsers reach it any other way, sign-in and forms are refused: {fix}"
        )
    if settings.trusted_proxies and settings.public_url.startswith("http://"):
        return (
            f"TBHUB_PUBLIC_URL is {settings.public_url} but proxies are trusted "
            f"(TBHUB_TRUSTED_PROXIES): if a TLS site is in front, {fix}"
        )
    return None


def origin_hint(request: Request, public_url: str) -> str | None:
    """For a request refused as cross-site that the browser sent from the page's own origin
    (or without saying where from): what the operator must set if that origin is tbhub's."""
    origin = request.headers.get("origin")
    if not origin or origin == "null" or request.headers.get("sec-fetch-site") not in (
        None, "same-origin",
    ):  # fmt: skip
        return None
    return (
        f"if {origin[:100]} is this tbhub's address, its operator must set "
        f"TBHUB_PUBLIC_URL={origin[:100]} (it is {site_of(public_url)}) and restart tbhub"
    )


class MismatchLog:
    """Logs, once per address, that browsers reach tbhub at an origin its public URL is not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def note(self, request: Request, public_url: str) -> None:
        origin = request.headers.get("origin", "")[:100]
        if request.headers.get("sec-fetch-site") != "same-origin" or not origin:
            return  # only a browser that vouches the request came from this very site
        with self._lock:
            if origin in self._seen or len(self._seen) >= LOGGED_ORIGINS_MAX:
                return
            self._seen.add(origin)
        log.warning(
            "a browser reached tbhub at %s, but TBHUB_PUBLIC_URL is %s: its forms and sign-in "
            "are refused as cross-site; set TBHUB_PUBLIC_URL=%s and restart tbhub",
            origin, public_url, origin,
        )  # fmt: skip
