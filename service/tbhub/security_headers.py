"""Security headers on every page and answer of the control plane.

tbhub's own pages load nothing from elsewhere and run no inline script, so their CSP is
strict. Board pages come from TensorBoard through nginx, which adds a CSP of tbhub's own
there (nginx/tbhub.conf.j2, BOARD_CSP); browsers enforce both it and TensorBoard's.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
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


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if scope["path"].startswith("/api/v1/docs") else PAGE_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in {**COMMON, "Content-Security-Policy": csp}.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
