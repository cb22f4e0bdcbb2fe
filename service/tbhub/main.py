"""create_app(settings): routers, error mapping and the lifespan that runs the supervisor."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from tbhub import __version__
from tbhub.api import board_gate, health, metrics, projects, retention
from tbhub.auth.permissions import AccessCache
from tbhub.auth.sessions import SessionSigner
from tbhub.boards import AccessTracker, BoardDirectory
from tbhub.db import make_engine, make_session_factory
from tbhub.deps import AppContext
from tbhub.errors import TbhubError
from tbhub.settings import Settings
from tbhub.supervisor.loop import Supervisor
from tbhub.templating import render
from tbhub.web import pages

log = logging.getLogger("tbhub")

HTTP_CODES = {400: "bad_request", 401: "not_authenticated", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed"}  # fmt: skip


def build_context(settings: Settings, wake: Callable[[], None] = lambda: None) -> AppContext:
    assert settings.secret_key is not None, "call settings.prepare_runtime first"
    engine = make_engine(settings.db_url)
    factory = make_session_factory(engine)
    return AppContext(
        settings=settings,
        engine=engine,
        factory=factory,
        signer=SessionSigner(settings.secret_key.get_secret_value(), settings.session_max_age),
        access=AccessCache(factory),
        boards=BoardDirectory(factory),
        tracker=AccessTracker(),
        wake_supervisor=wake,
    )


def create_app(
    context: AppContext,
    *,
    supervisor: Supervisor | None = None,
    on_shutdown: tuple[Callable[[], None], ...] = (),
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if supervisor is not None:
            supervisor.start()
        try:
            yield
        finally:
            if supervisor is not None:
                supervisor.shutdown(stop_boards=True)
            for hook in on_shutdown:
                hook()
            context.engine.dispose()

    app = FastAPI(
        title="tbhub",
        version=__version__,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )
    app.state.context = context
    app.include_router(health.router)
    app.include_router(projects.router)
    app.include_router(board_gate.router)
    app.include_router(retention.router)
    app.include_router(metrics.router)
    app.include_router(pages.router)
    app.mount(
        "/static", StaticFiles(directory=Path(__file__).parent / "web" / "static"), name="static"
    )
    _install_error_handlers(app)
    return app


def _error_response(request: Request, status: int, code: str, message: str) -> Response:
    wants_page = not request.url.path.startswith("/api/") and board_gate.wants_html(request)
    if wants_page:
        titles = {401: "Sign in needed", 403: "Not allowed", 404: "Not found"}
        return render(
            request,
            "error.html",
            {
                "status": status,
                "code": code,
                "message": message,
                "title": titles.get(status, "Error"),
            },
            status_code=status,
        )
    headers = {"WWW-Authenticate": 'Bearer realm="tbhub"'} if status == 401 else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TbhubError)
    async def tbhub_error(request: Request, exc: TbhubError) -> Response:
        return _error_response(request, exc.http_status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        return _error_response(request, 422, "invalid_input", f"invalid request: {problems}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = HTTP_CODES.get(exc.status_code, "error")
        message = str(exc.detail) if exc.status_code != 404 else f"nothing at {request.url.path}"
        return _error_response(request, exc.status_code, code, message)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return _error_response(
            request, 500, "internal", "tbhub hit an unexpected error; the server log has details"
        )
