"""The control plane in-process, on SQLite and PostgreSQL: projects, sign-in, the auth hook."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, Board, DesiredState, Role
from tbhub.core.settings import Settings
from tbhub.domain.boards import auth_cache_seconds
from tbhub.domain.projects import create_project, set_membership
from tbhub.domain.users import create_user
from tests.forms import csrf_header, form_token

PASSWORD = "a-good-password"


def seed(factory: sessionmaker[Session], settings: Settings) -> None:
    with transaction(factory) as session:
        for name, admin in (("alice", False), ("bob", False), ("root", True), ("eve", False)):
            create_user(session, name=name, password=PASSWORD, is_admin=admin, actor="test")
        for project in ("vision", "speech"):
            create_project(
                session, name=project, storage_root=settings.storage, owner=None, actor="test"
            )
        set_membership(session, project="vision", user="alice", role=Role.owner, actor="test")
        set_membership(session, project="speech", user="bob", role=Role.viewer, actor="test")
        set_membership(session, project="vision", user="bob", role=Role.editor, actor="test")


def sign_in(client: TestClient, name: str, password: str = PASSWORD) -> int:
    """Sign in through the form; JSON calls then carry the X-CSRF-Token header, as the
    pages' scripts do."""
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    response = client.post(
        "/auth/login",
        data={"username": name, "password": password, "csrf_token": form_token(client)},
        follow_redirects=False,
    )
    if response.status_code == 303:
        csrf_header(client)
    return response.status_code


def test_projects_list_shows_only_what_the_caller_may_see(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    expected = {
        "alice": {"vision": "owner"},
        "bob": {"speech": "viewer", "vision": "editor"},
        "eve": {},
        "root": {"speech": None, "vision": None},
    }
    for user, projects in expected.items():
        assert sign_in(client, user) == 303
        listed = client.get("/api/v1/projects").json()
        assert {p["name"]: p["role"] for p in listed} == projects, user


def test_project_detail_hides_projects_the_caller_cannot_see(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "eve")
    response = client.get("/api/v1/projects/vision")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    sign_in(client, "alice")
    assert client.get("/api/v1/projects/vision").json()["board_url"] == "/boards/vision/"
    bad = client.get("/api/v1/projects/Bad_Name")
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_input"


def test_anonymous_api_call_gets_401_in_the_error_shape(client: TestClient) -> None:
    response = client.get("/api/v1/projects")
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": "not_authenticated",
            "message": "sign in first (open /auth/login in a browser) or send an API token as "
            "`Authorization: Bearer tbh_...`",
        }
    }


def test_sign_in_without_the_csrf_token_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    client.get("/auth/login")
    response = client.post(
        "/auth/login", data={"username": "alice", "password": PASSWORD, "csrf_token": "forged"}
    )
    assert response.status_code == 403
    assert "tbhub_session" not in client.cookies


def test_session_cookie_is_httponly_and_samesite_lax(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    response = client.post(
        "/auth/login",
        data={
            "username": "alice",
            "password": PASSWORD,
            "csrf_token": form_token(client),
            "next": "//evil.example/",
        },
        follow_redirects=False,
    )
    assert response.headers["location"] == "/"
    cookie = next(
        h for h in response.headers.get_list("set-cookie") if h.startswith("tbhub_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie


def test_sign_out_clears_the_session(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    assert client.get("/api/v1/projects").status_code == 200
    response = client.post(
        "/auth/logout", data={"csrf_token": form_token(client, "/")}, follow_redirects=False
    )
    assert response.status_code == 303
    assert client.get("/api/v1/projects").status_code == 401


def auth(client: TestClient, uri: str) -> tuple[int, str | None]:
    response = client.get("/_auth/board", headers={"X-Tbhub-Original-Uri": uri})
    return response.status_code, response.headers.get("x-board-upstream")


def test_auth_hook_answers_each_role(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    client.cookies.clear()
    assert auth(client, "/boards/vision/") == (401, None)
    verdicts = {"alice": 200, "bob": 200, "root": 200, "eve": 403}
    for user, status in verdicts.items():
        sign_in(client, user)
        assert auth(client, "/boards/vision/data/runs")[0] == status, user
    sign_in(client, "alice")
    assert auth(client, "/boards/unknown/")[0] == 403
    assert auth(client, "/api/v1/projects")[0] == 403
    for unsafe in ("/boards/vision/../eve/", "/boards/vision/%2E%2E/x", "/boards/vision//x"):
        assert auth(client, unsafe)[0] == 403, unsafe
    assert auth(client, "/boards/vision/data?tag=a%2Fb")[0] == 200


def test_auth_hook_marks_a_stopped_board_wanted_and_routes_to_the_control_plane(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    status, upstream = auth(client, "/boards/vision/")
    assert (status, upstream) == (200, settings.api_address)
    with factory() as session:
        boards = {b.project.name: b.desired_state for b in session.query(Board)}
    assert boards == {"vision": DesiredState.running, "speech": DesiredState.stopped}


def test_admin_actions_are_audited(factory: sessionmaker[Session], settings: Settings) -> None:
    seed(factory, settings)
    with factory() as session:
        actions = [(e.action, e.target) for e in session.query(AuditEvent).order_by(AuditEvent.id)]
    assert ("user.create", "alice") in actions
    assert ("project.create", "vision") in actions
    assert ("project.member", "speech") in actions


def test_openapi_is_served_under_api_v1(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/projects" in spec["paths"]
    assert "/_auth/board" not in spec["paths"]


def test_readyz_checks_database_and_storage(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "storage": "ok"}


def test_nginx_auth_cache_never_outlasts_a_quarter_of_the_idle_timeout() -> None:
    assert [auth_cache_seconds(t) for t in (900, 20, 8, 3, 0.5)] == [5, 5, 2, 1, 1]


def test_every_answer_says_how_long_the_app_took(client: TestClient) -> None:
    # bench/ui_pages.py reads this header; an error page and a 401 carry it too.
    for path in ("/auth/login", "/api/v1/projects", "/no/such/page"):
        timing = client.get(path).headers["server-timing"]
        assert re.fullmatch(r"app;dur=\d+\.\d", timing), (path, timing)
