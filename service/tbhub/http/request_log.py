"""Every control-plane request timed by route (tbhub_http_request_duration_seconds), its
log lines tied to the request id nginx gave it, and with TBHUB_LOG_FORMAT=json one access
line per request (request id, user, project, route, status, milliseconds)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tbhub.core.log_context import begin_request, end_request
from tbhub.core.metrics import instruments

access_log = logging.getLogger("tbhub.access")
# Label values come from these alone: a client's made-up method or path adds no series.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"  # no route: a 404 by path; one label for all, never the raw path


def route_of(scope: Scope) -> str:
    """The route's template (`/api/v1/projects/{project}`), never the raw path: one time
    series per route, whatever names the requests carry."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class RequestLog:
    def __init__(self, app: ASGIApp, *, access_lines: bool = False) -> None:
        self.app = app
        self.access_lines = access_lines
        self.seconds = instruments().request_seconds
        # (method, route) -> its series' observe: labels() takes a lock on every call.
        self._timers: dict[tuple[str, str], Callable[[float], None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        info, token = begin_request(header.decode("latin-1"))
        started = time.perf_counter()
        status = 500  # what the client gets if the app fails before answering

        async def note_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, note_status)
        finally:
            elapsed = time.perf_counter() - started
            route = route_of(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self._timer(method, route)(elapsed)
            if self.access_lines:
                if info.project is None:
                    info.project = _project(scope)
                fields: dict[str, Any] = {
                    "method": scope["method"],
                    "route": route,
                    "status": status,
                    "ms": round(elapsed * 1000, 2),
                }
                access_log.info(
                    "%s %s %d", scope["method"], route, status, extra={"fields": fields}
                )
            end_request(token)

    def _timer(self, method: str, route: str) -> Callable[[float], None]:
        timer = self._timers.get((method, route))
        if timer is None:  # one per route template and method: a bounded set
            timer = self._timers[(method, route)] = self.seconds.labels(method, route).observe
        return timer


def _project(scope: Scope) -> str | None:
    project = scope.get("path_params", {}).get("project")
    return project if isinstance(project, str) else None
