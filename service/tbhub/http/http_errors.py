"""Every error an HTTP caller sees, in one shape: a JSON `{"error": {code, message}}`, or the
same as a page for a browser outside /api/.

Unexpected errors are caught by a middleware below Starlette's ServerErrorMiddleware, which
would re-raise after answering: uvicorn then logs the traceback a second time and closes
the connection, and nginx's next request on that kept-alive connection gets a 502.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tbhub.core.errors import DatabaseUnavailable, TbhubError
from tbhub.http.templating import render

log = logging.getLogger("tbhub")

HTTP_CODES = {400: "bad_request", 401: "not_authenticated", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed", 413: "too_large"}  # fmt: skip
PAGE_TITLES = {401: "Sign in needed", 403: "Not allowed", 404: "Not found"}
DATABASE_RETRY_AFTER_SECONDS = 5
# One log line per this many seconds while the database is down, not one per request.
DATABASE_LOG_INTERVAL = 30.0


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> Response:
    if not request.url.path.startswith("/api/") and wants_html(request):
        if status == 401 and request.method == "GET":  # a page for signed-in people
            return sign_in_redirect(request)
        context = {
            "status": status,
            "code": code,
            "message": message,
            "title": PAGE_TITLES.get(status, "Error"),
        }
        page = _error_page(request, status, code, context)
        page.headers.update(headers or {})
        return page
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="tbhub"'
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


ErrorPage = Callable[[Request, int, dict[str, Any]], Response]


def _error_page(request: Request, status: int, code: str, context: dict[str, Any]) -> Response:
    """The page with the signed-in header (web/render.py's error_page, which reads the user
    by the session cookie), or without it while the database is unreachable."""
    with_header: ErrorPage | None = getattr(request.app.state, "error_page", None)
    if with_header is None or code == DatabaseUnavailable.code:
        return render(request, "error.html", context, status_code=status)
    return with_header(request, status, context)


def sign_in_redirect(request: Request) -> Response:
    """Send a signed-out browser to sign in, and back to this page afterwards."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/auth/login?{urlencode({'next': here})}", status_code=303)


def database_unreachable(exc: BaseException) -> bool:
    """Errors that mean "the database cannot be reached or is busy", not a bug."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated


class _DatabaseLog:
    def __init__(self) -> None:
        self.last = 0.0

    def note(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self.last >= DATABASE_LOG_INTERVAL:
            self.last = now
            log.warning("database unavailable, answering 503: %s", str(exc).splitlines()[0])


_database_log = _DatabaseLog()


def unexpected_error_response(request: Request, exc: Exception) -> Response:
    if database_unreachable(exc):
        _database_log.note(exc)
        error = DatabaseUnavailable(
            "tbhub cannot reach its database right now; retry in a few seconds "
            "(operators: /readyz and the server log say more)"
        )
        headers = {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}
        return error_response(request, error.http_status, error.code, error.message, headers)
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(
        request, 500, "internal", "tbhub hit an unexpected error; the server log has details"
    )


class UnexpectedErrors:
    """Answers any exception no handler took with one 500 (or a 503 for an unreachable
    database) in the error shape, logs it once, and keeps the connection usable."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:  # half an answer is out: nothing left but to drop the connection
                raise
            response = unexpected_error_response(Request(scope), exc)
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI, *, error_page: ErrorPage | None = None) -> None:
    app.state.error_page = error_page
    app.add_middleware(UnexpectedErrors)

    @app.exception_handler(TbhubError)
    async def tbhub_error(request: Request, exc: TbhubError) -> Response:
        return error_response(request, exc.http_status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        return error_response(request, 422, "invalid_input", f"invalid request: {problems}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = HTTP_CODES.get(exc.status_code, "error")
        message = str(exc.detail) if exc.status_code != 404 else f"nothing at {request.url.path}"
        return error_response(request, exc.status_code, code, message)
