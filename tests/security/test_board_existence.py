"""Attack: learn which projects exist by asking the board gate about names. A project the
caller may not read answers exactly as one that does not exist (404, the same words but the
name), on the board page, its XHRs, for a token not naming it, and for an own-origin pass,
as the UI, the API and compare already do."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.serve.app import build_context, create_app
from tests.test_api import seed, sign_in

HTML = {"Accept": "text/html"}
JSON = {"Accept": "application/json"}
PATHS = ("/boards/{}/", "/boards/{}/data/runs", "/boards/{}/data/plugin/scalars/tags")


def answers(client: TestClient, project: str, headers: dict[str, str]) -> list[tuple[int, str]]:
    found = []
    for path in PATHS:
        for accept in (HTML, JSON):
            response = client.get(path.format(project), headers={**accept, **headers})
            found.append((response.status_code, response.text.replace(project, "<name>")))
    return found


def test_a_project_one_may_not_read_answers_as_one_that_does_not_exist(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "bob")  # an editor of vision and a viewer of speech
    created = client.post("/api/v1/tokens", json={"name": "s", "scope": "read",
                                                  "projects": ["speech"]}).json()  # fmt: skip
    sign_in(client, "eve")  # a member of nothing
    for headers in ({}, {"Authorization": f"Bearer {created['token']}"}):
        if headers:
            client.cookies.clear()
        hidden, absent = answers(client, "vision", headers), answers(client, "nosuch", headers)
        assert hidden == absent
        assert {status for status, _ in hidden} == {404}


def test_an_own_origin_pass_is_refused_alike_for_hidden_and_absent_projects(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    own_origin = settings.model_copy(update={"board_domain": "boards.test"})
    with TestClient(create_app(build_context(own_origin)), base_url="http://testserver") as client:
        sign_in(client, "eve")
        refused = [client.get("/auth/board-pass", params={"project": name}, headers=JSON)
                   for name in ("vision", "nosuch")]  # fmt: skip
    assert [r.status_code for r in refused] == [404, 404]
    texts = [
        r.text.replace(name, "<name>")
        for r, name in zip(refused, ("vision", "nosuch"), strict=True)
    ]
    assert texts[0] == texts[1]
