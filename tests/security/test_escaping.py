"""Attack: a name or path carrying HTML or script, echoed into a page (stored or reflected
XSS). Everything a user can choose comes back escaped, or is refused by the name rules."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.errors import InvalidInput
from tbhub.core.names import check_project_name, check_team_name, check_user_name
from tbhub.core.settings import Settings
from tests.test_api import seed, sign_in

PAYLOAD = "<script>alert(1)</script>"
HTML = {"Accept": "text/html"}


@pytest.mark.parametrize("check", [check_project_name, check_team_name, check_user_name])
def test_names_with_markup_are_refused(check: object) -> None:
    for name in (PAYLOAD, "a<b", 'x"onmouseover="y', "a'b", "a&b"):
        with pytest.raises(InvalidInput):
            check(name)  # type: ignore[operator]


def test_paths_and_inputs_echoed_into_pages_are_escaped(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    pages = [
        client.get(f"/no/such/{PAYLOAD}", headers=HTML),
        client.get(f"/auth/login?next=/{PAYLOAD}", headers=HTML),
        client.get("/auth/board-pass", params={"project": PAYLOAD}, headers=HTML),
        client.get(f"/share/{PAYLOAD}", headers=HTML),
    ]
    for page in pages:
        assert PAYLOAD not in page.text, (page.request.url, page.text[:300])
        assert "<script>alert" not in page.text
    assert "&lt;script&gt;" in pages[0].text


def test_json_errors_are_json_whatever_they_echo(client: TestClient) -> None:
    response = client.get(f"/api/v1/projects/{PAYLOAD}")
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-content-type-options"] == "nosniff"
