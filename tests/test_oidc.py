"""Sign-in through a real OpenID provider (node's oidc-provider): the code flow with state,
nonce and PKCE S256 all checked, accounts keyed by (issuer, subject), and every way a
callback can be forged or replayed refused. Both databases."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.oidc import PENDING_COOKIE, PendingSigner
from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, Role, User
from tbhub.core.settings import Settings
from tbhub.domain.teams import create_team, grant
from tbhub.serve.app import build_context, create_app
from tests.conftest import TEST_SECRET
from tests.oidc_provider import CLIENT_ID, CLIENT_SECRET, Provider, oidc_provider
from tests.oidc_provider import sign_in_at_provider as provider_login
from tests.test_api import seed

BASE = "http://testserver"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with oidc_provider(tmp_path_factory.mktemp("oidc"), [f"{BASE}/auth/oidc/callback"]) as op:
        yield op


def oidc_settings(settings: Settings, provider: Provider, **more: object) -> Settings:
    return settings.model_copy(update={
        "public_url": BASE,
        "oidc_discovery_url": provider.discovery_url,
        "oidc_client_id": CLIENT_ID,
        "oidc_client_secret": SecretStr(CLIENT_SECRET),
        "oidc_scopes": "openid email profile groups",
        **more,
    })  # fmt: skip


@pytest.fixture
def app_client(
    settings: Settings, factory: sessionmaker[Session], provider: Provider
) -> Iterator[TestClient]:
    with TestClient(create_app(build_context(oidc_settings(settings, provider))),
                    base_url=BASE) as client:  # fmt: skip
        yield client


def begin(client: TestClient, next_path: str = "/") -> str:
    response = client.get("/auth/oidc/login", params={"next": next_path}, follow_redirects=False)
    assert response.status_code == 302
    return response.headers["location"]


def finish(client: TestClient, callback_url: str) -> object:
    parts = urlsplit(callback_url)
    return client.get(f"{parts.path}?{parts.query}", follow_redirects=False)


def users(factory: sessionmaker[Session]) -> list[User]:
    with factory() as session:
        return list(session.scalars(select(User).order_by(User.id)))


def test_the_code_flow_signs_in_with_state_nonce_and_pkce_s256(
    app_client: TestClient, factory: sessionmaker[Session], provider: Provider
) -> None:
    provider.set_account("carol", email="carol@example.test", name="Carol C")
    url = begin(app_client, "/boards/vision/")
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["state"][0] and query["nonce"][0] and query["client_id"] == [CLIENT_ID]
    response = finish(app_client, provider_login(url, "carol"))
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/boards/vision/"
    assert "tbhub_session" in app_client.cookies
    assert app_client.get("/api/v1/projects").status_code == 200
    [carol] = users(factory)
    assert (carol.oidc_issuer, carol.oidc_subject) == (provider.issuer, "carol")
    assert (carol.name, carol.email, carol.display_name) == ("carol", "carol@example.test",
                                                            "Carol C")  # fmt: skip
    assert carol.password_hash is None


def test_name_and_email_are_synced_at_each_sign_in_but_never_identify(
    app_client: TestClient, factory: sessionmaker[Session], provider: Provider
) -> None:
    provider.set_account("dave", email="dave@example.test", name="Dave")
    finish(app_client, provider_login(begin(app_client), "dave"))
    provider.set_account("dave", email="d.new@example.test", name="Dave New")
    app_client.cookies.clear()
    finish(app_client, provider_login(begin(app_client), "dave"))
    # Another subject whose email differs only in case is another account.
    provider.set_account("impostor", email="D.NEW@example.test", name="Dave New")
    app_client.cookies.clear()
    finish(app_client, provider_login(begin(app_client), "impostor"))
    dave, impostor = users(factory)
    assert (dave.oidc_subject, dave.email, dave.display_name) == ("dave", "d.new@example.test",
                                                                  "Dave New")  # fmt: skip
    assert impostor.oidc_subject == "impostor" and impostor.id != dave.id


def test_a_callback_with_another_state_is_refused(
    app_client: TestClient, factory: sessionmaker[Session]
) -> None:
    callback = provider_login(begin(app_client), "erin")
    begin(app_client)  # a second sign-in started meanwhile replaces the pending state
    response = finish(app_client, callback)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "sign_in_refused"
    assert "state does not match" in response.json()["error"]["message"]
    assert "tbhub_session" not in app_client.cookies and users(factory) == []


def test_a_replayed_callback_is_refused(
    app_client: TestClient, factory: sessionmaker[Session]
) -> None:
    callback = provider_login(begin(app_client), "frank")
    assert finish(app_client, callback).status_code == 303
    app_client.cookies.delete("tbhub_session")
    replay = finish(app_client, callback)
    assert replay.status_code == 401
    assert "already used" in replay.json()["error"]["message"]
    assert "tbhub_session" not in app_client.cookies


def forge_pending(client: TestClient, **changes: str) -> None:
    """Re-sign the pending-login cookie with fields changed, as only the server could."""
    signer = PendingSigner(TEST_SECRET)
    [cookie] = [c for c in client.cookies.jar if c.name == PENDING_COOKIE]
    pending = signer.load(cookie.value)
    assert pending is not None
    client.cookies.delete(PENDING_COOKIE, domain=cookie.domain, path=cookie.path)
    client.cookies.set(PENDING_COOKIE, signer.dump(dataclasses.replace(pending, **changes)),
                       domain=cookie.domain, path=cookie.path)  # fmt: skip
    assert [c.value for c in client.cookies.jar if c.name == PENDING_COOKIE] != [cookie.value]


def test_an_id_token_for_another_nonce_is_refused(
    app_client: TestClient, factory: sessionmaker[Session]
) -> None:
    callback = provider_login(begin(app_client), "grace")
    forge_pending(app_client, nonce="not-the-nonce-the-provider-signed")
    response = finish(app_client, callback)
    assert response.status_code == 401
    assert "ID token did not validate" in response.json()["error"]["message"]
    assert users(factory) == []


def test_a_code_redeemed_without_the_right_pkce_verifier_is_refused(
    app_client: TestClient, factory: sessionmaker[Session]
) -> None:
    callback = provider_login(begin(app_client), "heidi")
    forge_pending(app_client, verifier="x" * 64)
    response = finish(app_client, callback)
    assert response.status_code == 401
    assert "did not accept the sign-in code" in response.json()["error"]["message"]
    assert users(factory) == []


def test_with_local_accounts_off_only_the_provider_signs_in(
    settings: Settings, factory: sessionmaker[Session], provider: Provider
) -> None:
    off = oidc_settings(settings, provider, local_login=False, oidc_provider_name="Example SSO")
    with TestClient(create_app(build_context(off)), base_url=BASE) as client:
        page = client.get("/auth/login")
        assert "Sign in with Example SSO" in page.text and 'name="password"' not in page.text
        refused = client.post("/auth/login", data={"username": "a", "password": "b"})
        assert refused.status_code == 403
        finish(client, provider_login(begin(client), "ivan"))
        assert client.get("/api/v1/projects").status_code == 200
    with factory() as session:
        actions = session.scalars(select(AuditEvent.action)).all()
    assert actions == ["user.create", "auth.sign_in"]


def test_settings_refuse_half_an_oidc_config_and_no_way_in(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs all three"):
        Settings(data_dir=tmp_path, oidc_client_id="x")
    with pytest.raises(ValueError, match="nobody could sign in"):
        Settings(data_dir=tmp_path, local_login=False)


def test_groups_from_the_provider_map_to_teams_at_each_sign_in(
    settings: Settings, factory: sessionmaker[Session], provider: Provider
) -> None:
    seed(factory, settings)
    with transaction(factory) as session:
        create_team(session, name="vision-team", actor="t")
        grant(session, project="vision", team="vision-team", role=Role.viewer, actor="t")
    mapped = oidc_settings(settings, provider, oidc_group_teams={"ml-vision": "vision-team"})
    with TestClient(create_app(build_context(mapped)), base_url=BASE) as client:
        provider.set_account("judy", groups=["ml-vision", "unrelated"])
        finish(client, provider_login(begin(client), "judy"))
        assert [p["name"] for p in client.get("/api/v1/projects").json()] == ["vision"]
        provider.set_account("judy", groups=["unrelated"])  # removed from the group
        client.cookies.clear()
        finish(client, provider_login(begin(client), "judy"))
        assert client.get("/api/v1/projects").json() == []


def test_an_oidc_session_is_shorter_so_groups_are_read_again_soon(
    settings: Settings, factory: sessionmaker[Session], provider: Provider
) -> None:
    short = oidc_settings(settings, provider, oidc_session_max_age=600)
    with TestClient(create_app(build_context(short)), base_url=BASE) as client:
        response = finish(client, provider_login(begin(client), "kate"))
        cookie = next(h for h in response.headers.get_list("set-cookie")  # type: ignore[attr-defined]
                      if h.startswith("tbhub_session="))  # fmt: skip
        assert "Max-Age=600" in cookie
