"""A project's pages offer only the tabs the reader's role may open: every tab shown answers
200, and members and share links (owners and admins) are not offered to editors or viewers.
Both databases."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tests.test_api import seed, sign_in
from tests.test_board_bar import add_run

TABS = re.compile(r'<nav class="tabs" aria-label="Project">(.*?)</nav>', re.DOTALL)
HREF = re.compile(r'href="([^"]+)"')
OWNER_TABS = {"/projects/{p}/members", "/projects/{p}/share"}


def tab_links(client: TestClient, page: str) -> list[str]:
    response = client.get(page)
    assert response.status_code == 200, (page, response.text)
    found = TABS.search(response.text)
    assert found is not None, f"no project tabs on {page}"
    return [h for h in HREF.findall(found.group(1)) if not h.startswith("/boards/")]


def test_each_role_is_offered_exactly_the_tabs_it_may_open(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    add_run(factory, settings, files=1)
    # (user, project, role): alice owns vision, bob edits vision and views speech, root is
    # an instance admin (an owner everywhere).
    readers = [("alice", "vision", True), ("bob", "vision", False), ("bob", "speech", False),
               ("root", "speech", True)]  # fmt: skip
    for user, project, owner in readers:
        sign_in(client, user)
        pages = [f"/projects/{project}", f"/projects/{project}/retention"]
        if project == "vision":
            run_id = client.get("/api/v1/projects/vision/runs").json()["runs"][0]["id"]
            pages.append(f"/projects/vision/runs/{run_id}")
        if owner:
            pages += [f"/projects/{project}/members", f"/projects/{project}/share"]
        owner_tabs = {t.format(p=project) for t in OWNER_TABS}
        for page in pages:
            links = tab_links(client, page)
            assert (owner_tabs <= set(links)) if owner else not (owner_tabs & set(links)), (
                user,
                page,
                links,
            )
            for link in links:
                assert client.get(link).status_code == 200, (user, page, link)
