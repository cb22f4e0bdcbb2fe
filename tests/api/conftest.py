"""A team on one instance: users with each role in `vision`, and tokens of each scope."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from tbhub.auth.sessions import SESSION_COOKIE
from tbhub.auth.tokens import create_token
from tbhub.auth.user_sessions import start_session
from tbhub.core.db import make_engine, transaction
from tbhub.core.models import Role, TokenScope
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project, set_membership
from tbhub.domain.users import create_user, get_user
from tbhub.http.deps import AppContext
from tbhub.serve import app as app_module

MEMBERS = {"alice": Role.owner, "bob": Role.editor, "carol": Role.viewer}
# name -> (user, scope, projects)
TOKENS = {
    "bob-write": ("bob", TokenScope.write, ["vision"]),
    "bob-read": ("bob", TokenScope.read, ["vision"]),
    "alice-write": ("alice", TokenScope.write, ["vision"]),
    "root-write": ("root", TokenScope.write, ["vision"]),
    "dave-write-speech": ("dave", TokenScope.write, ["speech"]),
}


@dataclass
class Team:
    client: TestClient
    settings: Settings
    user_ids: dict[str, int] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    token_ids: dict[str, int] = field(default_factory=dict)

    def headers(self, who: str | None) -> dict[str, str]:
        """Request headers for a caller: a user name (session) or a token name."""
        if who is None:
            return {}
        if who in self.secrets:
            return {"Authorization": f"Bearer {self.secrets[who]}"}
        context = self.client.app.state.context  # type: ignore[attr-defined]
        cookie = signed_in_cookie(context, self.user_ids[who])
        return {"Cookie": f"{SESSION_COOKIE}={cookie}", "X-CSRF-Token": context.csrf.token(cookie)}


def signed_in_cookie(context: AppContext, user_id: int) -> str:
    """A session cookie as a sign-in makes it: its session row, then the signed value."""
    expires_at = context.signer.expiry()
    with transaction(context.factory) as session:
        session_id = start_session(session, user_id=user_id, expires_at=expires_at)
    return context.signer.issue(user_id, session_id=session_id)


@pytest.fixture
def team(client: TestClient, factory: sessionmaker[Session], settings: Settings) -> Team:
    result = Team(client=client, settings=settings)
    with transaction(factory) as session:
        for name in ("alice", "bob", "carol", "dave", "eve", "root"):
            user = create_user(session, name=name, password=None, is_admin=name == "root",
                               actor="test")  # fmt: skip
            result.user_ids[name] = user.id
        for project in ("vision", "speech"):
            create_project(session, name=project, storage_root=settings.storage, owner=None,
                           actor="test")  # fmt: skip
        for name, role in MEMBERS.items():
            set_membership(session, project="vision", user=name, role=role, actor="test")
        set_membership(session, project="speech", user="dave", role=Role.editor, actor="test")
        for label, (user, scope, projects) in TOKENS.items():
            token, secret = create_token(
                session,
                user=get_user(session, name=user),
                name=label,
                scope=scope,
                projects=projects,
                expires_at=None,
                actor="test",
            )
            result.secrets[label] = secret
            result.token_ids[label] = token.id
    return result


def one_connection_client(team: Team, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    """A client of a server whose pool holds one connection, waiting 2 s for it at most."""

    def one_connection(url: str, *, threads: int = 1) -> Engine:  # one, whatever `threads` says
        return make_engine(url, poolclass=QueuePool, pool_size=1, max_overflow=0, pool_timeout=2)

    monkeypatch.setattr(app_module, "make_engine", one_connection)
    app = app_module.create_app(app_module.build_context(team.settings))
    return TestClient(app, base_url="http://testserver")
