"""What every route, in api/ and web/ alike, may depend on: the app context, a DB session
and the signed-in user."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Path, Request, Response, Security
from fastapi.security import APIKeyCookie, HTTPBearer
from sqlalchemy import Engine, bindparam, event, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.board_origin import BoardOrigins
from tbhub.auth.caller import Caller, bearer_token, refuse_token_in_url
from tbhub.auth.compare_access import CompareCache
from tbhub.auth.oidc import OidcClient
from tbhub.auth.permissions import AccessCache
from tbhub.auth.restrictions import RestrictionCache
from tbhub.auth.sessions import (
    SESSION_COOKIE,
    CookieNames,
    SessionData,
    SessionSigner,
    read_session_cookie,
)
from tbhub.auth.share_links import ShareLinkCache
from tbhub.auth.throttle import SignInGuard
from tbhub.auth.tokens import MINT_HINT, TokenCache
from tbhub.auth.user_sessions import LiveSessions, is_live, live_session, start_session
from tbhub.core.bounds import PROJECT_NAME_MAX, RUN_PATH_MAX, USER_NAME_MAX
from tbhub.core.cache_generations import Generations
from tbhub.core.db import transaction
from tbhub.core.errors import NotAuthenticated
from tbhub.core.log_context import note_request
from tbhub.core.models import User
from tbhub.core.settings import Settings
from tbhub.domain.board_changes import BoardChanges
from tbhub.domain.boards import AccessTracker, BoardDirectory, BoardRef
from tbhub.http import proxy_hop
from tbhub.http.csrf import CsrfTokens, require_header_token
from tbhub.storage.scalars import ScalarCache
from tbhub.storage.usage import ProjectUsage
from tbhub.supervisor.metrics import SupervisorMetrics

T = TypeVar("T")


class Invalidates(Protocol):
    def invalidate(self) -> None: ...


@dataclass
class AppContext:
    settings: Settings
    engine: Engine
    factory: sessionmaker[Session]
    signer: SessionSigner
    access: AccessCache
    compares: CompareCache  # who may open which compare board
    boards: BoardDirectory
    tracker: AccessTracker[BoardRef]
    wake_supervisor: Callable[[], None]
    csrf: CsrfTokens
    cookies: CookieNames
    shares: ShareLinkCache
    tokens: TokenCache
    usage: ProjectUsage  # bytes per project, for upload quotas
    scalars: ScalarCache  # runs' scalar curves read so far, for sparklines
    board_origins: BoardOrigins | None = None  # own-origin mode (TBHUB_BOARD_DOMAIN)
    oidc: OidcClient | None = None
    sign_ins: SignInGuard = field(default_factory=SignInGuard)
    # The caches' generations every process of this server shares (core/cache_generations.py).
    generations: Generations = field(default_factory=Generations)
    board_metrics: SupervisorMetrics = field(default_factory=SupervisorMetrics)
    # The supervisor's wake-ups for starting pages that wait on a board (api/board_state.py).
    board_changes: BoardChanges = field(default_factory=BoardChanges)
    # Passes the supervisor's wake-ups on to this server's API workers (serve/workers.py).
    tell_workers: Callable[[], None] = lambda: None
    sessions: LiveSessions = field(init=False)  # which sessions are live, for the auth hook
    restrictions: RestrictionCache = field(init=False)  # dashboards restricted per project

    def __post_init__(self) -> None:
        self.sessions = LiveSessions(self.factory, generation=self.generations.of("session"))
        self.restrictions = RestrictionCache(
            self.factory, generation=self.generations.of("restriction")
        )

    def forget_identities(self, after: Session | None = None) -> None:
        """Drop every cached session, token, role, share link and compare board: after a
        user is deleted, disabled or signed out, or a project deleted, every process of this
        server judges from the database at once, other replicas once their NOTIFY arrives."""
        caches = (self.sessions, self.tokens, self.access, self.shares, self.compares,
                  self.restrictions)  # fmt: skip
        self.invalidate(*caches, after=after)

    def invalidate(self, *caches: Invalidates, after: Session | None = None) -> None:
        """Drop these caches in every process of this server. Given the request's session,
        only once it commits: a request in between would cache the old rows again."""
        if after is not None:
            event.listen(after, "after_commit", lambda _: self.invalidate(*caches), once=True)
            return
        for cache in caches:
            cache.invalidate()


def client_address(request: Request) -> str:
    """The browser's address: X-Forwarded-For only from tbhub's own nginx (proxy_hop.py)."""
    secret = app_context(request).settings.secret_key
    assert secret is not None
    return proxy_hop.client_address(request, secret.get_secret_value())


def app_context(request: Request) -> AppContext:
    return request.app.state.context  # type: ignore[no-any-return]


async def get_context(request: Request) -> AppContext:
    """async: a dependency this cheap is not worth a hop to the threadpool and back (sync
    dependencies run there, each costing more than the dependency itself)."""
    return app_context(request)


ContextDep = Annotated[AppContext, Depends(get_context)]


def get_session(context: ContextDep) -> Iterator[Session]:
    with transaction(context.factory) as session:
        yield session


# scope="function": the transaction commits when the route returns, before the response
# leaves, so a write that answered 2xx is visible to the next request from anyone, and a
# commit that fails answers with its error instead of a 2xx already sent.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def signed_in_session(request: Request, context: AppContext) -> SessionData | None:
    """The session a valid cookie carries (not yet checked against the user's epoch);
    raises AmbiguousSession for a request whose cookies could be read two ways, and
    CsrfFailed for an unsafe /api/ call it would authenticate without its CSRF token."""
    cookie = read_session_cookie(request.headers.getlist("cookie"), context.cookies.session)
    data = context.signer.verify(cookie)
    if data is not None and cookie is not None:
        require_header_token(request, context.csrf, cookie)
    return data


def session_is_current(data: SessionData, *, disabled: bool, epoch: int) -> bool:
    """A session ends when its user is disabled or their session epoch moved on (sign out
    everywhere, a password change)."""
    return not disabled and data.epoch == epoch


def read_alone(context: AppContext, read: Callable[[Session], T]) -> T:
    """A read on a connection of its own, given back at once, in autocommit: no BEGIN and
    ROLLBACK around it. Authentication reads this way, not on the request's session: that
    session keeps its connection to the end, and a route that writes in a transaction of
    its own (run registration, a web form) or fills a cache would then need two connections
    at a time, which at 64 clients empties the pool and waits on it."""
    with context.factory() as own:
        own.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        return read(own)


def current_user(session: Session, data: SessionData) -> User | None:
    """The session's user, if the session is live and still theirs (not ended, the user not
    disabled, their session epoch unchanged)."""
    user = session.get(User, data.user_id)
    if user is None or not is_live(live_session(session, data.session_id), data):
        return None
    return (
        user if session_is_current(data, disabled=user.disabled, epoch=user.session_epoch) else None
    )


def signed_in_user(request: Request, context: AppContext) -> User | None:
    """The user of the request's session cookie, if it is current, read apart
    (read_alone): a row of no session."""
    data = signed_in_session(request, context)
    return read_alone(context, lambda own: current_user(own, data)) if data is not None else None


def get_optional_user(request: Request, context: ContextDep, session: SessionDep) -> User | None:
    """Read apart, then attached to the request's session without a query, so the route
    uses the user as its own row and the session takes no connection for it."""
    user = signed_in_user(request, context)
    return session.merge(user, load=False) if user is not None else None


def get_current_user(user: Annotated[User | None, Depends(get_optional_user)]) -> User:
    if user is None:
        raise NotAuthenticated("sign in first: open /auth/login in a browser")
    return user


OptionalUser = Annotated[User | None, Depends(get_optional_user)]
CurrentUser = Annotated[User, Depends(get_current_user)]


# Path parameters, bounded like the columns they are looked up in.
ProjectInPath = Annotated[str, Path(min_length=1, max_length=PROJECT_NAME_MAX)]
UserNameInPath = Annotated[str, Path(min_length=1, max_length=USER_NAME_MAX)]
RunPathInPath = Annotated[str, Path(min_length=1, max_length=RUN_PATH_MAX)]


def set_session_cookie(
    response: Response, context: AppContext, user: User, session: Session
) -> None:
    """A new session (its row, and its cookie). An OIDC account's is shorter
    (TBHUB_OIDC_SESSION_MAX_AGE): going back through the provider re-reads its groups, so a
    user taken out of a group loses what it gave them within that time even without signing
    in again."""
    settings = context.settings
    max_age = settings.oidc_session_max_age if user.oidc_subject else settings.session_max_age
    max_age = min(max_age, settings.session_max_age)
    expires_at = context.signer.expiry(max_age=max_age)
    session_id = start_session(session, user_id=user.id, expires_at=expires_at)
    response.set_cookie(
        context.cookies.session,
        context.signer.issue(
            user.id, session_id=session_id, epoch=user.session_epoch, max_age=max_age
        ),
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=context.settings.public_url.startswith("https://"),
        path="/",
    )


# -- callers: a session user or an API token (auth/caller.py holds the rules) ---------------

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token (`tbh_...`) from `tbhub admin token create` or POST /api/v1/tokens",
)
cookie_scheme = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    scheme_name="session",
    description="Browser sign-in (`__Host-tbhub_session` behind TLS)",
)


# One column of one row, on a connection of its own in autocommit (as read_alone), in Core:
# no ORM session, identity map or User object for what is a yes or no on every request.
_OWNER_DISABLED = select(User.disabled).where(User.id == bindparam("user_id"))


def token_owner_enabled(context: AppContext, user_id: int) -> bool:
    """Whether the token's user exists and is enabled, as the database has it now. The
    token cache already drops its grants when a process of this server, the admin CLI or
    another replica (NOTIFY) deletes or disables a user; this one cheap read also refuses
    at once what reached no cache: a change made by a command whose bump failed (a data
    dir it may not write), by hand in the database, or announced to a replica whose
    listener was reconnecting."""
    with context.engine.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        disabled = connection.execute(_OWNER_DISABLED, {"user_id": user_id}).scalar()
    return disabled is False


def get_optional_caller(
    request: Request,
    context: ContextDep,
    _bearer: Annotated[object, Security(bearer_scheme)] = None,
    _cookie: Annotated[object, Security(cookie_scheme)] = None,
) -> Caller | None:
    """A bearer header wins over a cookie; a bad token is refused rather than falling back
    to the cookie (fail closed). A token is never accepted in the URL. No request session:
    a route that needs none (run registration) then costs no threadpool hops to open and
    close one (each hop costs more than the dependency itself)."""
    refuse_token_in_url(request.query_params)
    token = bearer_token(request.headers.get("authorization"))
    if token is not None:
        grant = context.tokens.lookup(token)
        if not token_owner_enabled(context, grant.user_id):
            raise NotAuthenticated(
                f"the account {grant.user_name} was deleted or disabled, and its tokens with "
                f"it; {MINT_HINT}"
            )
        note_request(user=grant.user_name, user_id=grant.user_id)
        return Caller(user_id=grant.user_id, name=grant.user_name, is_admin=False, grant=grant)
    user = signed_in_user(request, context)
    if user is None:
        return None
    note_request(user=user.name, user_id=user.id)
    return Caller.of_user(user)


def known_caller(caller: Caller | None) -> Caller:
    if caller is None:
        raise NotAuthenticated(
            "sign in first (open /auth/login in a browser) or send an API token as "
            "`Authorization: Bearer tbh_...`"
        )
    return caller


async def get_caller(caller: Annotated[Caller | None, Depends(get_optional_caller)]) -> Caller:
    """async, as get_context: no threadpool hop for a check this small."""
    return known_caller(caller)


CallerDep = Annotated[Caller, Depends(get_caller)]
