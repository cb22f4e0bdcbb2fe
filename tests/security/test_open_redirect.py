"""Attack: a sign-in link whose `next` sends the freshly signed-in user to another site
(phishing after a real sign-in). Only local paths are followed, whatever the spelling."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.web.pages import safe_next
from tests.forms import form_token
from tests.test_api import PASSWORD, seed

EVIL = [
    "//evil.example/", "/\\evil.example", "\\\\evil.example", "https://evil.example/",
    "http:evil.example", "/\t/evil.example", "/\n/evil.example", "/\r/evil.example",
    " //evil.example", "/\x00/evil", "/\x7f/evil", "javascript:alert(1)", "evil.example",
    "///evil.example", "/%09/evil.example".replace("%09", "\t"),
]  # fmt: skip


@pytest.mark.parametrize("target", EVIL)
def test_a_next_that_leaves_the_site_goes_home_instead(target: str) -> None:
    assert safe_next(target) == "/"


def test_local_paths_with_queries_are_kept() -> None:
    assert safe_next("/boards/vision/?runFilter=a%2Fb") == "/boards/vision/?runFilter=a%2Fb"


def test_the_sign_in_form_never_redirects_off_site(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    for target in EVIL[:8]:
        client.cookies.clear()
        response = client.post(
            "/auth/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": form_token(client),
                  "next": target},
            follow_redirects=False,
        )  # fmt: skip
        assert response.status_code == 303 and response.headers["location"] == "/", target
