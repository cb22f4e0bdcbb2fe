"""API tokens: hashed, shown once, scoped, expiring, revocable, header-only; and /me."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import ApiToken, AuditEvent
from tests.api.conftest import Team


def test_only_a_hash_of_the_token_is_stored(team: Team, factory: sessionmaker[Session]) -> None:
    secret = team.secrets["bob-write"]
    assert secret.startswith("tbh_") and len(secret) == 47
    with factory() as session:
        stored = [
            str(value)
            for token in session.scalars(select(ApiToken))
            for value in vars(token).values()
        ]
        audit = [str(e.detail) for e in session.scalars(select(AuditEvent))]
    assert not any(secret[4:] in value for value in stored + audit)


def test_minting_over_the_api_shows_the_secret_once(team: Team) -> None:
    h = team.headers("bob")
    made = team.client.post("/api/v1/tokens", json={"name": "ci", "scope": "read",
                            "projects": ["vision"], "expires_in_days": 1}, headers=h)  # fmt: skip
    assert made.status_code == 201, made.text
    secret = made.json()["token"]
    listed = team.client.get("/api/v1/tokens", headers=h).json()
    assert made.json()["id"] in [t["id"] for t in listed]
    assert all("token" not in t for t in listed)
    me = team.client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"}).json()
    assert me["via"] == "token" and me["user"] == "bob" and me["is_admin"] is False
    assert me["projects"] == [{"name": "vision", "role": "viewer", "can": ["read"]}]


def test_me_for_a_session_shows_each_projects_role(team: Team) -> None:
    me = team.client.get("/api/v1/me", headers=team.headers("alice")).json()
    assert me["via"] == "session" and me["token"] is None
    assert me["projects"] == [
        {"name": "vision", "role": "owner", "can": ["read", "write to", "manage"]}
    ]


def test_a_revoked_token_is_refused_at_once(team: Team) -> None:
    h = team.headers("bob-write")
    assert team.client.get("/api/v1/me", headers=h).status_code == 200
    revoked = team.client.delete(f"/api/v1/tokens/{team.token_ids['bob-write']}",
                                 headers=team.headers("bob"))  # fmt: skip
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert revoked.json()["state"] == "revoked"
    refused = team.client.get("/api/v1/me", headers=h)
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]


def test_an_owner_may_revoke_a_token_on_their_project_but_a_stranger_may_not(
    team: Team,
) -> None:
    url = f"/api/v1/tokens/{team.token_ids['bob-write']}"
    assert team.client.delete(url, headers=team.headers("carol")).status_code == 404
    assert team.client.delete(url, headers=team.headers("alice")).status_code == 200


def test_an_expired_token_is_refused_with_what_to_do(
    team: Team, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        token = session.get_one(ApiToken, team.token_ids["bob-read"])
        token.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    team.client.app.state.context.tokens.invalidate()  # type: ignore[attr-defined]
    response = team.client.get("/api/v1/me", headers=team.headers("bob-read"))
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]
    assert "tbhub admin token create" in response.json()["error"]["message"]
    states = {t["name"]: t["state"] for t in
              team.client.get("/api/v1/tokens", headers=team.headers("bob")).json()}  # fmt: skip
    assert states == {"bob-read": "expired", "bob-write": "active"}


def test_unknown_malformed_and_non_bearer_credentials_are_401(team: Team) -> None:
    for header in ("Bearer tbh_" + "A" * 43, "Bearer nonsense", "Basic Ym9iOnB3", "Bearer "):
        response = team.client.get("/api/v1/me", headers={"Authorization": header})
        assert response.status_code == 401, header
        assert response.json()["error"]["code"] == "not_authenticated"


def test_a_bad_token_never_falls_back_to_the_session_cookie(team: Team) -> None:
    headers = {**team.headers("alice"), "Authorization": "Bearer tbh_" + "B" * 43}
    assert team.client.get("/api/v1/me", headers=headers).status_code == 401


def test_a_token_in_the_url_is_refused_even_when_valid(team: Team) -> None:
    secret = team.secrets["bob-write"]
    for query in (f"access_token={secret}", f"token={secret}", f"x={secret}"):
        response = team.client.get(f"/api/v1/me?{query}")
        assert response.status_code == 400, query
        assert "Authorization: Bearer" in response.json()["error"]["message"]


def test_last_use_is_recorded_in_batches(team: Team, factory: sessionmaker[Session]) -> None:
    tokens = team.client.app.state.context.tokens  # type: ignore[attr-defined]
    for _ in range(3):
        assert team.client.get("/api/v1/me", headers=team.headers("bob-read")).status_code == 200
    with factory() as session:
        assert session.get_one(ApiToken, team.token_ids["bob-read"]).last_used_at is None
    tokens.flush()
    with factory() as session:
        assert session.get_one(ApiToken, team.token_ids["bob-read"]).last_used_at is not None


def test_a_token_cannot_mint_tokens_or_reach_another_project(team: Team) -> None:
    h = team.headers("bob-write")
    mint = team.client.post("/api/v1/tokens", json={"name": "x", "scope": "write",
                            "projects": ["vision"]}, headers=h)  # fmt: skip
    assert mint.status_code == 403
    speech = team.client.get("/api/v1/projects/speech", headers=team.headers("dave-write-speech"))
    assert speech.status_code == 200
    listed = team.client.get("/api/v1/projects", headers=h).json()
    assert [p["name"] for p in listed] == ["vision"]
    assert listed[0]["logdir"] == str(team.settings.storage / "vision")


def test_openapi_declares_the_bearer_scheme(team: Team) -> None:
    spec = team.client.get("/api/v1/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["token"] == {"type": "http", "scheme": "bearer", "description": schemes[
        "token"]["description"]}  # fmt: skip
    assert {"token": []} in spec["paths"]["/api/v1/projects/{project}/runs"]["post"]["security"]


def test_the_board_gate_lets_a_token_read_the_boards_of_its_projects(team: Team) -> None:
    def hook(who: str | None, project: str = "vision") -> int:
        headers = {**team.headers(who), "X-Tbhub-Original-Uri": f"/boards/{project}/data/runs"}
        return team.client.get("/_auth/board", headers=headers).status_code

    assert hook("bob-read") == 200 and hook("bob-write") == 200
    assert hook("dave-write-speech") == 403  # not a member of vision
    assert hook("dave-write-speech", "speech") == 200
    assert hook("alice-write", "speech") == 403  # alice is no member of speech
    unknown = {"Authorization": "Bearer tbh_" + "C" * 43, "X-Tbhub-Original-Uri": "/boards/vision/"}
    assert team.client.get("/_auth/board", headers=unknown).status_code == 401
