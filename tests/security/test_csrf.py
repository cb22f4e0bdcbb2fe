"""Attack: make a signed-in member's browser change something in tbhub from another site
(a form or a fetch on evil.example, or on a sibling subdomain that can also plant cookies).
Every state-changing call made with the session cookie carries a token bound to that
session, and none may come from another site."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.serve.app import build_context, create_app
from tests.forms import form_token
from tests.test_api import PASSWORD, seed, sign_in

POLICY = "/api/v1/projects/vision/retention"


def keep_last(client: TestClient) -> int | None:
    return client.get(POLICY).json()["overrides"]["keep_last"]  # type: ignore[no-any-return]


def test_a_json_write_with_only_the_session_cookie_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    token = client.headers.pop("X-CSRF-Token")
    # The check is made where the cookie authenticates the call, so each method on a route
    # that takes it (a method no route takes is 405 before anyone is authenticated).
    for method, path in (("PUT", POLICY), ("POST", f"{POLICY}/pins"),
                         ("DELETE", f"{POLICY}/pins/1")):  # fmt: skip
        response = client.request(method, path, json={"keep_last": 1})
        assert response.status_code == 403, method
        assert response.json()["error"]["code"] == "csrf_failed"
        assert "X-CSRF-Token" in response.json()["error"]["message"]
    assert keep_last(client) is None
    client.headers["X-CSRF-Token"] = token
    assert client.put(POLICY, json={"keep_last": 1}).status_code == 200


def test_a_write_from_another_origin_is_refused_even_with_a_token(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain
    ):
        response = client.put(POLICY, json={"keep_last": 2}, headers=headers)
        assert response.status_code == 403, headers
        assert response.json()["error"]["code"] == "csrf_failed"
    assert keep_last(client) is None
    same = {"Origin": settings.public_url.rstrip("/"), "Sec-Fetch-Site": "same-origin"}
    assert client.put(POLICY, json={"keep_last": 2}, headers=same).status_code == 200


def test_a_token_from_another_session_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "eve")  # the attacker's own, valid session and token
    attackers_token = client.headers["X-CSRF-Token"]
    sign_in(client, "alice")
    client.headers["X-CSRF-Token"] = attackers_token
    assert client.put(POLICY, json={"keep_last": 3}).status_code == 403


def test_the_sign_in_form_refuses_a_double_submit_pair_an_attacker_chose(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    client.cookies.set("tbhub_csrf", "attacker-chosen")
    response = client.post("/auth/login", data={"username": "alice", "password": PASSWORD,
                                                "csrf_token": "attacker-chosen"})  # fmt: skip
    assert response.status_code == 403 and "tbhub_session" not in client.cookies
    # Nor from another site, with a real token: login CSRF.
    response = client.post(
        "/auth/login",
        data={"username": "alice", "password": PASSWORD, "csrf_token": form_token(client)},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403 and "tbhub_session" not in client.cookies


def test_sign_out_from_another_site_is_refused(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    token = form_token(client, "/")
    response = client.post("/auth/logout", data={"csrf_token": token},
                           headers={"Sec-Fetch-Site": "cross-site"})  # fmt: skip
    assert response.status_code == 403
    assert client.get("/api/v1/projects").status_code == 200


def test_behind_tls_cookies_are_host_prefixed_and_secure(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    """Attack: a sibling host sets or shadows tbhub's cookies. `__Host-` cookies cannot be."""
    seed(factory, settings)
    tls = settings.model_copy(update={"public_url": "https://testserver"})
    app = create_app(build_context(tls))
    with TestClient(app, base_url="https://testserver") as client:
        page = client.get("/auth/login")
        assert page.headers["set-cookie"].startswith("__Host-tbhub_csrf=")
        response = client.post(
            "/auth/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": form_token(client)},
            follow_redirects=False,
        )
        cookie = next(c for c in response.headers.get_list("set-cookie")
                      if c.startswith("__Host-tbhub_session="))  # fmt: skip
        assert "Secure" in cookie and "Path=/" in cookie and "Domain" not in cookie
        assert client.get("/api/v1/projects").status_code == 200
        # The unprefixed name, as a sibling host could set it, is nobody's session here.
        value = client.cookies.get("__Host-tbhub_session")
        client.cookies.clear()
        assert client.get("/api/v1/projects", headers={"Cookie": f"tbhub_session={value}"}
                          ).status_code == 401  # fmt: skip
