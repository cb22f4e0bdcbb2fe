"""Security headers on every page and answer of the control plane.

tbhub's own pages load nothing from elsewhere and run no inline script, so their CSP is
strict; 'inline-speculation-rules' lets the project page's inline Speculation Rules (JSON
that asks Chromium to prerender the board page, no script) through, and nothing else.
Board pages come from TensorBoard through nginx, which adds a CSP of tbhub's own
there (nginx/tbhub.conf.j2, BOARD_CSP); browsers enforce both it and TensorBoard's.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.types import Scope

from tbhub.http.response_headers import ResponseHeaders

PAGE_CSP = (
    "default-src 'self'; script-src 'self' 'inline-speculation-rules'; style-src 'self'; "
    "img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
# FastAPI's Swagger page boots itself with one inline script.
DOCS_CSP = PAGE_CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'").replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)
# Narrows what TensorBoard allows (it permits framing from anywhere and its own CDN): no
# framing by other sites, no data sent to other origins, no plugins, no <base> tricks.
BOARD_CSP = (
    "frame-ancestors 'self'; connect-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'"
)
COMMON = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class SecurityHeaders(ResponseHeaders):
    """The headers above, unless the answer set its own."""

    def editor(self, scope: Scope) -> Callable[[MutableHeaders], None]:
        csp = DOCS_CSP if scope["path"].startswith("/api/v1/docs") else PAGE_CSP

        def add(headers: MutableHeaders) -> None:
            for name, value in {**COMMON, "Content-Security-Policy": csp}.items():
                headers.setdefault(name, value)

        return add
