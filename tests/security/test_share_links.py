"""Attack: use a share link for more than it gives (another board, the API, the UI), after
it was revoked or expired, or mint one without owning the project. Both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, ShareLink
from tbhub.core.settings import Settings
from tests.test_api import seed, sign_in

LINKS = "/api/v1/projects/vision/share-links"


def hook(client: TestClient, uri: str, cookie: str | None) -> int:
    headers = {"X-Tbhub-Original-Uri": uri}
    if cookie is not None:
        headers["Cookie"] = f"tbhub_share={cookie}"
    return client.get("/_auth/board", headers=headers).status_code


def make_link(client: TestClient) -> tuple[int, str]:
    sign_in(client, "alice")  # owner of vision
    created = client.post(LINKS, json={"expires_in_hours": 2, "note": "for a reviewer"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["url"].startswith("/share/tbs_") and body["state"] == "active"
    client.cookies.clear()
    client.headers.pop("X-CSRF-Token", None)
    return body["id"], body["url"].removeprefix("/share/")


def test_a_share_link_opens_its_board_only(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    _, token = make_link(client)
    opened = client.get(f"/share/{token}", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/boards/vision/"
    cookie = opened.headers["set-cookie"]
    assert "Path=/boards/vision/" in cookie and "HttpOnly" in cookie
    client.cookies.clear()
    assert hook(client, "/boards/vision/data/runs", token) == 200
    assert hook(client, "/boards/speech/data/runs", token) == 401
    for path in ("/api/v1/projects", "/api/v1/projects/vision", "/"):
        response = client.get(path, headers={"Cookie": f"tbhub_share={token}"},
                              follow_redirects=False)  # fmt: skip
        assert response.status_code in (302, 401), path
    with factory() as session:
        actions = set(session.scalars(select(AuditEvent.action)))
    assert "share.create" in actions


def test_revoked_and_expired_links_stop_working(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    link_id, token = make_link(client)
    assert hook(client, "/boards/vision/", token) == 200
    sign_in(client, "alice")
    assert client.delete(f"{LINKS}/{link_id}").status_code == 204
    listed = client.get(LINKS).json()["links"]
    assert [(k["id"], k["state"]) for k in listed] == [(link_id, "revoked")]
    client.cookies.clear()
    assert hook(client, "/boards/vision/", token) == 401
    assert client.get(f"/share/{token}").status_code == 404

    _, token = make_link(client)
    with transaction(factory) as session:
        session.execute(update(ShareLink).values(expires_at=datetime.now(UTC) - timedelta(1)))
    client.app.state.context.shares.invalidate()  # type: ignore[attr-defined]
    assert hook(client, "/boards/vision/", token) == 401
    assert "expired" in client.get(f"/share/{token}").json()["error"]["message"]


def test_only_owners_and_admins_manage_share_links(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert client.post(LINKS, json={}).status_code == 401
    for user, status in (("bob", 403), ("eve", 404), ("root", 201)):  # editor, outsider, admin
        sign_in(client, user)
        assert client.post(LINKS, json={}).status_code == status, user
        assert client.get(LINKS).status_code == (200 if status == 201 else status), user
    for bad in ({"expires_in_hours": 0}, {"expires_in_hours": 10**6}, {"note": "x" * 300}):
        assert client.post(LINKS, json=bad).status_code == 422


def test_forged_and_malformed_share_tokens_get_nothing(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    make_link(client)
    for token in ("tbs_" + "A" * 43, "tbs_short", "x" * 47, ""):
        assert hook(client, "/boards/vision/", token) == 401, token
    assert client.get("/share/tbs_" + "A" * 43).status_code == 404
    assert client.get("/share/" + "x" * 200).status_code == 422
