"""Identities that cookies, board cookies and tokens carry are never reused, and a session
ends on the server when its user signs out, is disabled or deleted (issue 15, items 1, 3, 4).

In-process, on SQLite and PostgreSQL: the API and the board gate's hook (`/_auth/board`)
judge the same credentials. "Another process" (the admin CLI, another replica) is the
service functions on their own database session, with no cache of this app cleared.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.tokens import create_token
from tbhub.core.db import transaction
from tbhub.core.models import ApiToken, CompareBoard, Project, Role, ShareLink, TokenScope, User
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project, set_membership
from tbhub.domain.users import create_user, delete_user, get_user, set_disabled
from tbhub.serve.app import build_context, create_app
from tests.forms import form_token
from tests.test_api import PASSWORD
from tests.test_api import sign_in as form_sign_in


def seed(factory: sessionmaker[Session], settings: Settings) -> str:
    """root (admin), zed (viewer of `zp`, the newest account) and a read token of zed's."""
    with transaction(factory) as session:
        create_user(session, name="root", password=PASSWORD, is_admin=True, actor="test")
        for project in ("zp", "np"):
            create_project(session, name=project, storage_root=settings.storage, owner=None,
                           actor="test")  # fmt: skip
        create_user(session, name="zed", password=PASSWORD, is_admin=False, actor="test")
        set_membership(session, project="zp", user="zed", role=Role.viewer, actor="test")
        _, secret = create_token(session, user=get_user(session, name="zed"), name="zed-ci",
                                 scope=TokenScope.read, projects=["zp"], expires_at=None,
                                 actor="test")  # fmt: skip
    return secret


def sign_in(client: TestClient, name: str) -> str:
    """Sign in through the form; the session cookie's value."""
    assert form_sign_in(client, name) == 303
    return str(client.cookies["tbhub_session"])


def with_cookie(client: TestClient, cookie: str) -> dict[str, str]:
    """Headers that present a copied session cookie, and nothing else of the client's."""
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    return {"Cookie": f"tbhub_session={cookie}"}


def hook(client: TestClient, headers: dict[str, str], project: str) -> int:
    return client.get(
        "/_auth/board", headers={**headers, "X-Tbhub-Original-Uri": f"/boards/{project}/"}
    ).status_code


def recreate_as_newbie(factory: sessionmaker[Session]) -> int:
    """A new account made right after zed's deletion, a member of `np` (zed never was)."""
    with transaction(factory) as session:
        user = create_user(session, name="newbie", password=PASSWORD, is_admin=False,
                           actor="test")  # fmt: skip
        set_membership(session, project="np", user="newbie", role=Role.owner, actor="test")
        return user.id


def test_a_deleted_accounts_cookie_and_token_are_refused_at_once(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    token = {"Authorization": f"Bearer {seed(factory, settings)}"}
    zed_cookie = sign_in(client, "zed")
    assert client.get("/api/v1/me").json()["user"] == "zed"
    assert client.get("/api/v1/me", headers=token).json()["user"] == "zed"  # cached now
    assert hook(client, with_cookie(client, zed_cookie), "zp") == 200

    sign_in(client, "root")
    assert client.delete("/api/v1/users/zed").status_code == 204
    # At once, in the process that deleted it: a 401 (never a 500), not 10 s later.
    me = client.get("/api/v1/me", headers=token)
    assert me.status_code == 401 and me.json()["error"]["code"] == "not_authenticated"
    assert client.get("/api/v1/projects/zp/runs", headers=token).status_code == 401
    assert hook(client, token, "zp") == 401

    recreate_as_newbie(factory)
    old = with_cookie(client, zed_cookie)
    assert client.get("/api/v1/me", headers=old).status_code == 401
    assert client.get("/api/v1/projects/np", headers=old).status_code == 401
    assert hook(client, old, "np") == 401 and hook(client, old, "zp") == 401
    assert client.get("/api/v1/me", headers=token).status_code == 401


def test_an_account_deleted_by_another_process_never_lends_its_id_to_the_next(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    """The admin CLI deletes zed and makes newbie while this server still caches zed's
    session and token: neither ever acts as newbie, and the API refuses both at once."""
    token = {"Authorization": f"Bearer {seed(factory, settings)}"}
    zed_cookie = sign_in(client, "zed")
    with transaction(factory) as session:
        create_project(session, name="xp", storage_root=settings.storage, owner=None, actor="t")
    old = with_cookie(client, zed_cookie)
    # Caches now hold zed's session and token (and his roles in what he asked for).
    assert hook(client, old, "xp") == 403 and hook(client, token, "xp") == 403

    with transaction(factory) as session:  # another process: no cache here is cleared
        delete_user(session, name="zed", actor="cli")
    recreate_as_newbie(factory)
    with transaction(factory) as session:
        set_membership(session, project="zp", user="newbie", role=Role.viewer, actor="test")

    assert client.get("/api/v1/me", headers=old).status_code == 401
    assert client.get("/api/v1/me", headers=token).status_code == 401
    assert client.get("/api/v1/projects/zp/runs", headers=token).status_code == 401
    # The hook reads caches (10 s): what they still hold may act as zed for that long,
    # never as newbie.
    assert hook(client, old, "np") == 401
    assert hook(client, token, "zp") == 401


def test_ids_that_credentials_carry_are_never_reused(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    """Delete the newest row of each table whose id a cookie, token, pass or cache carries
    and make another: it gets a new id (SQLite reuses the highest rowid by default)."""
    seed(factory, settings)
    expires = datetime.now(UTC)
    with transaction(factory) as session:
        zed = get_user(session, name="zed")
        np_id = session.query(Project).filter_by(name="np").one().id
        link = ShareLink(token_hash="h" * 64, project_id=np_id, created_by="t", expires_at=expires)
        board = CompareBoard(slug="cmp-000000000001", owner_id=zed.id)
        session.add_all([link, board])
        session.flush()
        old = {User: zed.id, Project: np_id, ApiToken: session.query(ApiToken).one().id,
               ShareLink: link.id, CompareBoard: board.id}  # fmt: skip
    with transaction(factory) as session:
        for model, row_id in old.items():
            row = session.get(model, row_id)
            if row is not None:  # the user's token and compare board went with the user
                session.delete(row)
    with transaction(factory) as session:
        user = create_user(session, name="newbie", password=None, is_admin=True, actor="t")
        project = create_project(session, name="np2", storage_root=settings.storage, owner=None,
                                 actor="t")  # fmt: skip
        token, _ = create_token(session, user=user, name="n", scope=TokenScope.read,
                                projects=["zp"], expires_at=None, actor="t")  # fmt: skip
        link = ShareLink(token_hash="i" * 64, project_id=project.id, created_by="t",
                         expires_at=expires)  # fmt: skip
        board = CompareBoard(slug="cmp-000000000002", owner_id=user.id)
        session.add_all([link, board])
        session.flush()
        new = {User: user.id, Project: project.id, ApiToken: token.id, ShareLink: link.id,
               CompareBoard: board.id}  # fmt: skip
    for model, old_id in old.items():
        assert new[model] > old_id, f"{model.__tablename__} gave id {old_id} out again"


def sign_out(client: TestClient) -> None:
    response = client.post(
        "/auth/logout", data={"csrf_token": form_token(client, "/")}, follow_redirects=False
    )
    assert response.status_code == 303


def test_sign_out_ends_that_session_on_the_server(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    """A copy of the cookie taken before sign-out opens nothing after it; the same user's
    session in another browser goes on (sign out everywhere ends those)."""
    seed(factory, settings)
    other_browser = sign_in(client, "zed")
    copied = sign_in(client, "zed")
    sign_out(client)
    old = with_cookie(client, copied)
    assert client.get("/api/v1/me", headers=old).status_code == 401
    assert client.get("/api/v1/projects", headers=old).status_code == 401
    assert hook(client, old, "zp") == 401
    still = with_cookie(client, other_browser)
    assert client.get("/api/v1/me", headers=still).json()["user"] == "zed"
    assert hook(client, still, "zp") == 200


def test_sign_out_ends_the_board_sessions_made_from_it(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    """Own-origin mode: the board cookie a pass made stops with the session it came from."""
    seed(factory, settings)
    settings.board_domain = "boards.test"
    context = build_context(settings)
    with TestClient(create_app(context), base_url="http://testserver") as client:
        sign_in(client, "zed")
        passed = client.get("/auth/board-pass", params={"project": "zp"},
                            follow_redirects=False)  # fmt: skip
        assert passed.status_code == 302
        entered = client.get(passed.headers["location"], follow_redirects=False)
        assert entered.status_code == 303
        board_cookie = entered.cookies[context.cookies.board]
        on_board = {"Host": "zp.boards.test", "Cookie": f"{context.cookies.board}={board_cookie}"}
        assert hook(client, on_board, "zp") == 200
        sign_out(client)
        client.cookies.clear()
        assert hook(client, on_board, "zp") == 401
    context.engine.dispose()


def test_disabling_an_account_ends_its_sessions_for_good(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    """Disable, then enable: the sessions from before stay over; its tokens are refused
    while it is disabled (at once, even when another process disabled it) and work after."""
    token = {"Authorization": f"Bearer {seed(factory, settings)}"}
    copied = sign_in(client, "zed")
    assert client.get("/api/v1/me", headers=token).status_code == 200
    sign_in(client, "root")
    for disabled in (True, False):
        patched = client.patch("/api/v1/users/zed", json={"disabled": disabled})
        assert patched.status_code == 200
        if disabled:
            assert client.get("/api/v1/me", headers=token).status_code == 401
            assert hook(client, token, "zp") == 401
    old = with_cookie(client, copied)
    assert client.get("/api/v1/me", headers=old).status_code == 401
    assert hook(client, old, "zp") == 401
    assert client.get("/api/v1/me", headers=token).status_code == 200
    # Disabled by another process (the admin CLI): the API refuses the token at once.
    with transaction(factory) as session:
        set_disabled(session, name="zed", disabled=True, actor="cli")
    assert client.get("/api/v1/me", headers=token).status_code == 401
