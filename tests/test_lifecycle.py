"""The account lifecycle over the API: members and team roles by owners, accounts by admins,
your own password and sessions by yourself; every endpoint checked against every role.
Both databases."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Role
from tbhub.core.settings import Settings
from tbhub.domain.teams import add_member, create_team, grant
from tests.test_api import PASSWORD, seed, sign_in

# (method, path, body) -> status for: anonymous, eve (no role), bob (editor of vision, viewer
# of speech), alice (owner of vision), root (admin). 404 hides a project you cannot see.
MATRIX = [
    ("GET", "/api/v1/projects/vision/members", None, (401, 404, 403, 200, 200)),
    ("PUT", "/api/v1/projects/vision/members/eve", {"role": "viewer"}, (401, 404, 403, 200, 200)),
    ("DELETE", "/api/v1/projects/vision/members/bob", None, (401, 404, 403, 204, 204)),
    ("PUT", "/api/v1/projects/vision/teams/crew", {"role": "editor"}, (401, 404, 403, 200, 200)),
    ("DELETE", "/api/v1/projects/vision/teams/crew", None, (401, 404, 403, 204, 204)),
    ("GET", "/api/v1/users", None, (401, 403, 403, 403, 200)),
    ("POST", "/api/v1/users", {"name": "dora", "password": "dora-pass"}, (401, 403, 403, 403, 201)),
    ("PATCH", "/api/v1/users/eve", {"disabled": False}, (401, 403, 403, 403, 200)),
    ("POST", "/api/v1/users/eve/sign-out-everywhere", None, (401, 403, 403, 403, 204)),
    ("GET", "/api/v1/audit", None, (401, 403, 403, 403, 200)),
    ("GET", "/api/v1/teams", None, (401, 403, 403, 403, 200)),
    ("PUT", "/api/v1/teams/crew/members/eve", None, (401, 403, 403, 403, 204)),
    ("DELETE", "/api/v1/teams/crew/members/bob", None, (401, 403, 403, 403, 204)),
    ("GET", "/api/v1/projects/vision/share-links", None, (401, 404, 403, 200, 200)),
]  # fmt: skip
CALLERS = (None, "eve", "bob", "alice", "root")


@pytest.mark.parametrize(("method", "path", "body", "expected"), MATRIX,
                         ids=[f"{m} {p}" for m, p, _, _ in MATRIX])  # fmt: skip
def test_every_lifecycle_endpoint_by_every_role(
    client: TestClient, factory: sessionmaker[Session], settings: Settings,
    method: str, path: str, body: dict | None, expected: tuple[int, ...],
) -> None:  # fmt: skip
    seed(factory, settings)
    with transaction(factory) as session:
        create_team(session, name="crew", actor="t")
        grant(session, project="vision", team="crew", role=Role.editor, actor="t")
        add_member(session, team="crew", user="bob", actor="t")
    for caller, status in zip(CALLERS, expected, strict=True):
        seed_roles = status in (200, 204)  # a success may change what the next caller sees
        if caller is None:
            client.cookies.clear()
            client.headers.pop("X-CSRF-Token", None)
        else:
            sign_in(client, caller)
        response = client.request(method, path, json=body)
        assert response.status_code == status, (caller, response.text)
        if seed_roles and method == "DELETE" and "/projects/" in path and "/members/" in path:
            client.put(path, json={"role": "editor"})  # put bob back for the next caller
        if seed_roles and method == "DELETE" and "teams/" in path:
            body_back = None if "/members/" in path else {"role": "editor"}
            client.put(path, json=body_back)


def test_an_admin_disables_and_deletes_accounts_but_not_the_last_admin(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    assert client.patch("/api/v1/users/eve", json={"disabled": True}).json()["disabled"] is True
    assert client.delete("/api/v1/users/eve").status_code == 204
    assert [u["name"] for u in client.get("/api/v1/users").json()["users"]] == [
        "alice", "bob", "root"]  # fmt: skip
    last = client.delete("/api/v1/users/root")
    assert last.status_code == 403 and "last enabled admin" in last.json()["error"]["message"]
    # Nor disabled, nor made a plain user: nobody could manage the instance then.
    for change in ({"disabled": True}, {"is_admin": False}):
        refused = client.patch("/api/v1/users/root", json=change)
        assert refused.status_code == 403, change
        assert "last enabled admin" in refused.json()["error"]["message"]
    root = client.get("/api/v1/users").json()["users"][-1]
    assert (root["name"], root["is_admin"], root["disabled"]) == ("root", True, False)
    # With a second admin, the first may step down.
    assert client.patch("/api/v1/users/alice", json={"is_admin": True}).status_code == 200
    assert client.patch("/api/v1/users/root", json={"is_admin": False}).json()["is_admin"] is False


def test_an_admin_creates_a_local_account_that_can_sign_in(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    made = client.post("/api/v1/users", json={"name": "dora", "password": "dora-password"})
    assert made.status_code == 201
    assert made.json() == {"name": "dora", "is_admin": False, "disabled": False, "email": None,
                           "oidc": False}  # fmt: skip
    again = client.post("/api/v1/users", json={"name": "dora", "password": "x"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_exists"
    bad = client.post("/api/v1/users", json={"name": "-dora", "password": "x"})
    assert bad.status_code == 422 and "user name" in bad.json()["error"]["message"]
    assert sign_in(client, "dora", "dora-password") == 303
    assert client.get("/api/v1/me").json()["user"] == "dora"


def test_you_change_your_own_password_and_keep_only_this_session(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    other = TestClient(client.app, base_url="http://testserver")
    sign_in(other, "alice")
    sign_in(client, "alice")
    new = "a-new-password"
    wrong = client.post("/api/v1/me/password", json={"current_password": "no", "new_password": new})
    assert wrong.status_code == 401
    change = {"current_password": PASSWORD, "new_password": new}
    changed = client.post("/api/v1/me/password", json=change)
    assert changed.status_code == 200
    assert client.get("/api/v1/projects").status_code == 200  # this browser: a new cookie
    assert other.get("/api/v1/projects").status_code == 401  # every other session ended
    assert sign_in(client, "alice", "a-new-password") == 303
    assert client.post("/api/v1/me/sign-out-everywhere").status_code == 204
    assert client.get("/api/v1/projects").status_code == 401
