"""create_app(settings): routers, error mapping and the lifespan that runs what serves beside
the app (the replica: the supervisor and jobs when it leads)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import anyio
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from tbhub import __version__
from tbhub.api import (
    admin,
    alert_rules,
    audit,
    board_bar,
    board_gate,
    board_state,
    boards,
    channels,
    compare,
    csrf,
    health,
    incidents,
    members,
    metrics,
    pip,
    projects,
    retention,
    run_contents,
    run_search,
    runs,
    share_links,
    teams,
    tokens,
    uploads,
    users,
    views,
)
from tbhub.api import openapi as api_docs
from tbhub.auth.board_origin import BoardOrigins
from tbhub.auth.compare_access import CompareCache
from tbhub.auth.oidc import OidcClient, OidcConfig
from tbhub.auth.permissions import AccessCache
from tbhub.auth.sessions import CookieNames, SessionSigner
from tbhub.auth.share_links import ShareLinkCache
from tbhub.auth.tokens import TokenCache
from tbhub.core.cache_generations import Generations
from tbhub.core.db import make_engine, make_session_factory, request_threads
from tbhub.core.resources import web_static
from tbhub.core.settings import Settings
from tbhub.domain.boards import AccessTracker, BoardDirectory, BoardRef
from tbhub.http.csrf import CsrfGuard, CsrfTokens
from tbhub.http.deps import AppContext
from tbhub.http.http_errors import install_error_handlers
from tbhub.http.request_log import RequestLog
from tbhub.http.security_headers import SecurityHeaders
from tbhub.http.server_timing import ServerTiming
from tbhub.storage.quota_ledger import QuotaLedger
from tbhub.storage.scalars import ScalarCache
from tbhub.storage.usage import ProjectUsage
from tbhub.web import admin as admin_pages
from tbhub.web import alerts as alert_pages
from tbhub.web import board as board_pages
from tbhub.web import board_origin, oidc, pages, render, share
from tbhub.web import channels as channel_pages
from tbhub.web import compare as compare_pages
from tbhub.web import email as email_pages
from tbhub.web import health as health_pages
from tbhub.web import members as member_pages
from tbhub.web import projects as project_pages
from tbhub.web import retention as retention_pages
from tbhub.web import run_table as run_table_pages
from tbhub.web import runs as run_pages
from tbhub.web import share_links as share_link_pages
from tbhub.web import tokens as token_pages
from tbhub.web import views as view_pages

log = logging.getLogger("tbhub")


def build_context(settings: Settings, wake: Callable[[], None] = lambda: None) -> AppContext:
    assert settings.secret_key is not None, "call settings.prepare_runtime first"
    engine = make_engine(settings.db_url, threads=request_threads(settings.api_workers))
    factory = make_session_factory(engine)
    generations = Generations.in_data_dir(settings.data_dir)
    return AppContext(
        settings=settings,
        engine=engine,
        factory=factory,
        signer=SessionSigner(settings.secret_key.get_secret_value(), settings.session_max_age),
        access=AccessCache(factory, generation=generations.of("access")),
        compares=CompareCache(factory, generation=generations.of("compare")),
        boards=BoardDirectory(factory),
        tracker=AccessTracker[BoardRef](),
        wake_supervisor=wake,
        csrf=CsrfTokens(settings.secret_key.get_secret_value()),
        cookies=CookieNames.for_url(settings.public_url),
        shares=ShareLinkCache(factory, generation=generations.of("share_link")),
        tokens=TokenCache(factory, generation=generations.of("token")),
        board_origins=board_origins(settings),
        oidc=oidc_client(settings),
        usage=ProjectUsage(settings.storage, QuotaLedger.in_data_dir(settings.data_dir)),
        scalars=ScalarCache(settings.storage),
        generations=generations,
    )


def board_origins(settings: Settings) -> BoardOrigins | None:
    if settings.board_domain is None:
        return None
    assert settings.secret_key is not None
    return BoardOrigins(
        board_domain=settings.board_domain,
        public_url=settings.public_url,
        secret_key=settings.secret_key.get_secret_value(),
        max_age=settings.session_max_age,
    )


def oidc_client(settings: Settings) -> OidcClient | None:
    if not settings.oidc_enabled:
        return None
    assert settings.oidc_discovery_url and settings.oidc_client_id and settings.oidc_client_secret
    return OidcClient(
        OidcConfig(
            discovery_url=settings.oidc_discovery_url,
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret.get_secret_value(),
            scopes=settings.oidc_scopes,
            groups_claim=settings.oidc_groups_claim,
        )
    )


class Background(Protocol):
    """What runs beside the app for its lifetime (`tbhub serve`: replica.Replica)."""

    def start(self) -> None: ...
    def shutdown(self) -> None: ...


def create_app(
    context: AppContext,
    *,
    duties: Background | None = None,
    on_shutdown: tuple[Callable[[], None], ...] = (),
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The threads sync routes run on, as many as the pool has kept connections for.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = request_threads(context.settings.api_workers)
        if duties is not None:
            duties.start()
        try:
            yield
        finally:
            if duties is not None:
                duties.shutdown()
            for hook in on_shutdown:
                hook()
            context.engine.dispose()

    app = FastAPI(
        title="tbhub",
        version=__version__,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # api/openapi.py serves /api/v1/docs from local assets
        redoc_url=None,
    )
    app.state.context = context
    app.include_router(health.router)
    app.include_router(csrf.router)
    app.include_router(projects.router)
    app.include_router(runs.router)
    app.include_router(run_search.router)
    app.include_router(tokens.router)
    app.include_router(uploads.router)
    app.include_router(run_contents.router)
    app.include_router(pip.router)
    app.include_router(board_gate.router)
    app.include_router(board_bar.router)
    app.include_router(board_state.router)
    app.include_router(retention.router)
    app.include_router(audit.router)
    app.include_router(admin.router)
    app.include_router(share_links.router)
    app.include_router(channels.router)
    app.include_router(members.router)
    app.include_router(users.router)
    app.include_router(teams.router)
    app.include_router(boards.router)
    app.include_router(compare.router)
    app.include_router(views.router)
    app.include_router(incidents.router)
    app.include_router(alert_rules.router)
    app.include_router(metrics.router)
    app.include_router(pages.router)
    app.include_router(project_pages.router)
    for settings_pages in (
        member_pages,
        token_pages,
        share_link_pages,
        retention_pages,
        board_pages,
    ):
        app.include_router(settings_pages.router)
    app.include_router(admin_pages.router)
    app.include_router(run_pages.router)
    app.include_router(run_table_pages.router)
    for run_health_pages in (health_pages, alert_pages, channel_pages, email_pages):
        app.include_router(run_health_pages.router)
    api_docs.install(app)
    app.include_router(oidc.router)
    app.include_router(share.router)
    app.include_router(compare_pages.router)
    app.include_router(view_pages.router)
    app.include_router(board_origin.router)
    app.mount("/static", StaticFiles(directory=web_static()), name="static")
    install_error_handlers(app, error_page=render.error_page)
    app.add_middleware(
        CsrfGuard,
        public_url=context.settings.public_url,
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(ServerTiming)
    app.add_middleware(RequestLog, access_lines=context.settings.log_format == "json")
    return app
