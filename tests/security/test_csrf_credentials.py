"""Attack: a signed-in member's browser sends a state-changing call with the session cookie,
no CSRF token, and some `Authorization` header that is not a valid API token (`Basic x`, a
junk bearer). The credential that authenticates a call decides its CSRF rule: whatever the
cookie authenticates needs the session's token, on every unsafe route of the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.http.csrf import UNSAFE_METHODS
from tests.test_api import seed, sign_in
from tests.test_input_bounds import full_spec, resolve

JUNK_AUTHORIZATION = ("Basic eDp4", "Bearer not-a-token", "Digest x", "x")
# Values for path parameters, so each call reaches its identity check: the admin it is made
# as sees every project, and these names exist after seed().
PATH_VALUES = {"project": "vision", "name": "vision", "user": "bob", "team": "ml"}
HEADER_VALUES = {"Upload-Offset": "0", "Upload-Complete": "?0"}  # parsed before the caller


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    headers: dict[str, str]
    form: dict[str, str]

    def send(self, client: TestClient, authorization: str) -> Response:
        headers = {**self.headers, "Authorization": authorization}
        return client.request(self.method, self.path, headers=headers, data=self.form or None,
                              follow_redirects=False)  # fmt: skip


def sample(spec: dict[str, Any], schema: dict[str, Any]) -> str:
    """A value the parameter's schema accepts, so validation lets the call through."""
    schema = resolve(spec, schema)
    options = schema.get("anyOf") or [schema]
    enum = next((o["enum"] for o in options if "enum" in o), None)
    return str(enum[0]) if enum else "1"


def unsafe_calls(client: TestClient) -> list[Call]:
    """One valid-looking call for each unsafe route of the app (its OpenAPI, hidden routes
    included): path values, required headers, and the fields of a form it reads."""
    spec = full_spec(client.app)  # type: ignore[arg-type]
    calls = []
    for template, operations in spec["paths"].items():
        for method, operation in operations.items():
            if method.upper() not in UNSAFE_METHODS:
                continue
            params = {p["in"] + ":" + p["name"]: p for p in operation.get("parameters", [])}
            values = {name.split(":", 1)[1]: PATH_VALUES.get(name.split(":", 1)[1])
                      or sample(spec, p["schema"]) for name, p in params.items()
                      if name.startswith("path:")}  # fmt: skip
            path = template.format(**values)
            headers = {p["name"]: HEADER_VALUES.get(p["name"], "1") for p in params.values()
                       if p["in"] == "header"}  # fmt: skip
            content = operation.get("requestBody", {}).get("content", {})
            form_schema = content.get("application/x-www-form-urlencoded", {}).get("schema")
            form = {}
            if form_schema is not None:
                form_schema = resolve(spec, form_schema)
                form = {name: sample(spec, prop)
                        for name, prop in form_schema.get("properties", {}).items()}  # fmt: skip
                form.pop("csrf_token", None)
            calls.append(Call(method.upper(), path, headers, form))
    return calls


@pytest.mark.parametrize("authorization", JUNK_AUTHORIZATION)
def test_no_unsafe_route_takes_the_cookie_without_its_csrf_token(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, authorization: str
) -> None:
    seed(factory, settings)
    sign_in(client, "root")  # an admin reaches every route's identity check
    client.headers.pop("X-CSRF-Token")
    calls = unsafe_calls(client)
    assert len(calls) > 50  # the walk sees the whole app, api/ and web/ alike
    let_through = {}
    for call in calls:
        response = call.send(client, authorization)
        # Refused for want of the token (403), or not authenticated at all (401: the junk
        # header is taken as a failed token). Anything else went past the identity check.
        if response.status_code not in (401, 403):
            let_through[f"{call.method} {call.path}"] = response.status_code
    assert let_through == {}, sorted(let_through.items())


def test_the_reported_calls_are_refused_and_change_nothing(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    token = client.headers.pop("X-CSRF-Token")
    junk = {"Authorization": "Basic eDp4"}
    response = client.post("/api/v1/teams", json={"name": "csrf-team"}, headers=junk)
    assert response.status_code == 403 and response.json()["error"]["code"] == "csrf_failed"
    response = client.patch("/api/v1/users/bob", json={"disabled": True}, headers=junk)
    assert response.status_code == 403 and response.json()["error"]["code"] == "csrf_failed"
    client.headers["X-CSRF-Token"] = token
    accounts = {u["name"]: u for u in client.get("/api/v1/users").json()["users"]}
    assert accounts["bob"]["disabled"] is False
    assert "csrf-team" not in {t["name"] for t in client.get("/api/v1/teams").json()["teams"]}


def test_a_call_authenticated_by_an_api_token_needs_no_csrf_token(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    body = {"name": "ci", "scope": "write", "projects": ["vision"]}
    created = client.post("/api/v1/tokens", json=body).json()
    client.headers.pop("X-CSRF-Token")
    bearer = {"Authorization": f"Bearer {created['token']}"}
    response = client.post("/api/v1/projects/vision/runs", json={"name": "by-token"},
                           headers=bearer)  # fmt: skip
    assert response.status_code == 201, response.text
