"""The one way control-plane middleware sets headers: pure ASGI (no response buffered),
editing the headers of each HTTP answer as it starts (security_headers.py,
server_timing.py)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ResponseHeaders:
    """Calls the editor `editor(scope)` returns on the headers of the answer to that HTTP
    request, as the answer starts; other scopes (lifespan, websockets) pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def editor(self, scope: Scope) -> Callable[[MutableHeaders], None]:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        edit = self.editor(scope)

        async def send_edited(message: Message) -> None:
            if message["type"] == "http.response.start":
                edit(MutableHeaders(scope=message))
            await send(message)

        await self.app(scope, receive, send_edited)
