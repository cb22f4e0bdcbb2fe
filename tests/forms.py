"""Reading tbhub's pages as a browser would, for tests that post its forms."""

from __future__ import annotations

import httpx


def form_token(client: httpx.Client, page: str = "/auth/login") -> str:
    """The CSRF token the page's forms carry."""
    return client.get(page).text.split('name="csrf_token" value="')[1].split('"')[0]


def post_sign_in(client: httpx.Client, name: str, password: str) -> httpx.Response:
    """Post the sign-in form as a browser would; a good sign-in answers 303."""
    return client.post(
        "/auth/login",
        data={"username": name, "password": password, "csrf_token": form_token(client),
              "next": "/"},
    )  # fmt: skip


def csrf_header(client: httpx.Client) -> None:
    """After sign-in: send the X-CSRF-Token header with every call, as tbhub's scripts do."""
    client.headers["X-CSRF-Token"] = client.get("/api/v1/csrf").json()["token"]
