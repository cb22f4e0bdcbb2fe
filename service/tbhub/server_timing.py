"""`Server-Timing: app;dur=<ms>` on every control-plane answer: the time from the request
reaching the app to its response starting (routing, auth, queries, rendering). Browsers show
it in their developer tools; bench/ui_pages.py reads it to measure pages' server time."""

from __future__ import annotations

import time

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ServerTiming:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                elapsed = (time.perf_counter() - started) * 1000
                MutableHeaders(scope=message).append("Server-Timing", f"app;dur={elapsed:.1f}")
            await send(message)

        await self.app(scope, receive, send_with_timing)
