"""`Server-Timing: app;dur=<ms>` on every control-plane answer: the time from the request
reaching the app to its response starting (routing, auth, queries, rendering). Browsers show
it in their developer tools; bench/ui_pages.py reads it to measure pages' server time."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.types import Scope

from tbhub.http.response_headers import ResponseHeaders


class ServerTiming(ResponseHeaders):
    def editor(self, scope: Scope) -> Callable[[MutableHeaders], None]:
        started = time.perf_counter()

        def add(headers: MutableHeaders) -> None:
            elapsed = (time.perf_counter() - started) * 1000
            headers.append("Server-Timing", f"app;dur={elapsed:.1f}")

        return add
