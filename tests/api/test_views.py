"""/api/v1/projects/<p>/views over both databases: saved views, who may list, read, make
and delete them (every role, every token scope), their filters checked whole, and the runs
each shows following the registry."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Role, SavedView
from tbhub.domain.projects import set_membership
from tbhub.domain.views import MAX_VIEW_RUNS, RECENT_RUNS
from tests.api.conftest import Team

VIEWS = "/api/v1/projects/vision/views"


def register(team: Team, name: str, **fields: object) -> int:
    response = team.client.post("/api/v1/projects/vision/runs", json={"name": name, **fields},
                                headers=team.headers("root"))  # fmt: skip
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def make(team: Team, who: str, name: str = "sweep", **body: object) -> dict[str, object]:
    response = team.client.post(VIEWS, json={"name": name, **body}, headers=team.headers(who))
    assert response.status_code == 201, response.text
    return dict(response.json())


# (caller, may make a view) -- viewers use shared views; a view is a board, so it costs
# memory: editors and owners make them.
MAKERS = [("root", True), ("alice", True), ("bob", True), ("bob-write", True),
          ("alice-write", True), ("carol", False), ("bob-read", False), ("eve", False),
          ("dave-write-speech", False), (None, False)]  # fmt: skip


@pytest.mark.parametrize(("who", "allowed"), MAKERS)
def test_who_may_make_a_view(team: Team, who: str | None, allowed: bool) -> None:
    response = team.client.post(VIEWS, json={"name": "mine"}, headers=team.headers(who))
    expected = 201 if allowed else {"carol": 403, "bob-read": 403, None: 401}.get(who, 404)
    assert response.status_code == expected, response.text
    if not allowed:
        assert set(response.json()) == {"error"}, "the one error shape"


# (caller, sees a private view of bob's, may delete it): a project's owners see and manage
# every view of it (a write token acts as an editor).
READERS = [("bob", True, True), ("bob-write", True, True), ("bob-read", True, False),
           ("alice", True, True), ("alice-write", False, False), ("carol", False, False),
           ("root", True, True), ("eve", False, False)]  # fmt: skip


@pytest.mark.parametrize(("who", "sees", "deletes"), READERS)
def test_a_private_view_is_its_owners_and_a_project_owners_who_may_delete_it(
    team: Team, who: str, sees: bool, deletes: bool
) -> None:
    view = make(team, "bob", name="private")
    read = team.client.get(f"{VIEWS}/{view['id']}", headers=team.headers(who))
    assert read.status_code == (200 if sees else 404), read.text
    listed = team.client.get(VIEWS, headers=team.headers(who))
    if who == "eve":
        assert listed.status_code == 404
    else:
        assert (view["id"] in [v["id"] for v in listed.json()]) == sees
    gone = team.client.delete(f"{VIEWS}/{view['id']}", headers=team.headers(who))
    assert gone.status_code == (204 if deletes else 403 if sees else 404)


@pytest.mark.parametrize("who", ["carol", "bob-read", "alice", "bob"])
def test_a_shared_view_is_listed_to_every_reader_and_only_its_owner_or_an_owner_deletes_it(
    team: Team, who: str
) -> None:
    view = make(team, "bob", name="shared", shared=True)
    assert view["id"] in [v["id"] for v in team.client.get(VIEWS, headers=team.headers(who)).json()]
    read = team.client.get(f"{VIEWS}/{view['id']}", headers=team.headers(who))
    assert read.status_code == 200 and read.json()["link"] == f"/projects/vision/views/{view['id']}"
    gone = team.client.delete(f"{VIEWS}/{view['id']}", headers=team.headers(who))
    assert gone.status_code == {"carol": 403, "bob-read": 403}.get(who, 204)


def test_a_view_shows_the_runs_its_filter_matches_and_follows_the_registry(team: Team) -> None:
    fast = register(team, "fast", hparams={"lr": 0.1}, tags=["sweep"])
    register(team, "slow", hparams={"lr": 0.01}, tags=["sweep"])
    view = make(team, "bob", filter={"tag": "sweep", "params": ["hparam.lr>=0.05"]})
    assert view["runs"] == 1 and view["filter"] == {"tag": "sweep", "params": ["hparam.lr>=0.05"]}
    assert view["board_url"].startswith("/boards/cmp-")
    register(team, "faster", hparams={"lr": 0.5}, tags=["sweep"])
    again = team.client.get(f"{VIEWS}/{view['id']}", headers=team.headers("bob")).json()
    assert again["runs"] == 2, "a new matching run is on the view"
    trashed = team.client.delete(f"/api/v1/projects/vision/runs/{fast}",
                                 headers=team.headers("alice"))  # fmt: skip
    assert trashed.status_code == 200, trashed.text
    after = team.client.get(f"{VIEWS}/{view['id']}", headers=team.headers("bob")).json()
    assert after["runs"] == 1, "a trashed run leaves the view"


def register_path(team: Team, name: str, **fields: object) -> str:
    response = team.client.post("/api/v1/projects/vision/runs", json={"name": name, **fields},
                                headers=team.headers("root"))  # fmt: skip
    assert response.status_code == 201, response.text
    return str(response.json()["path"])


def test_the_default_view_holds_the_recent_the_running_and_the_pinned_runs(team: Team) -> None:
    pinned = register_path(team, "old-pinned", status="finished")
    register(team, "old-running")
    register(team, "old-finished", status="finished")
    pin = team.client.post("/api/v1/projects/vision/retention/pins", json={"run": pinned},
                           headers=team.headers("bob"))  # fmt: skip
    assert pin.status_code == 201, pin.text
    for n in range(RECENT_RUNS + 3):
        register(team, f"new-{n:02d}", status="finished")
    view = team.client.post(f"{VIEWS}/default", headers=team.headers("carol"))
    assert view.status_code == 200, view.text
    assert view.json()["preset"] == "recent" and view.json()["runs"] == RECENT_RUNS + 2
    again = team.client.post(f"{VIEWS}/default", headers=team.headers("bob"))
    assert again.json()["id"] == view.json()["id"], "one default view per project"
    assert MAX_VIEW_RUNS >= RECENT_RUNS + 2, "old-finished is neither: it is left out"


def test_only_making_the_default_view_drops_every_process_s_compare_cache(team: Team) -> None:
    # Its new board must reach every process at once; opening it again changes nothing, and
    # must not make every worker drop its cache (and NOTIFY every replica) on each visit.
    compares = team.client.app.state.context.generations.of("compare")  # type: ignore[attr-defined]
    before = compares.current()
    assert team.client.post(f"{VIEWS}/default", headers=team.headers("bob")).status_code == 200
    made = compares.current()
    assert made != before, "the new view's board reaches the other processes"
    for who in ("bob", "carol"):
        assert team.client.post(f"{VIEWS}/default", headers=team.headers(who)).status_code == 200
        page = team.client.get("/projects/vision/views/default", headers=team.headers(who))
        assert page.status_code == 200, page.text
    assert compares.current() == made, "opening it again drops no cache"


BAD_FILTERS = [
    {"status": ["sleeping"]},
    {"since": "yesterday"},
    {"until": "2026-01-01T00:00"},  # no time zone
    {"params": ["hparam.lr~0.1"]},
    {"params": ["hparam.lr=1"] * 9},
    {"tag": "x" * 65},
    {"q": "x" * 201},
    {"colour": "red"},
]


@pytest.mark.parametrize("flt", BAD_FILTERS)
def test_a_bad_filter_is_refused_whole_with_the_one_error_shape(
    team: Team, flt: dict[str, object], factory: sessionmaker[Session]
) -> None:
    response = team.client.post(VIEWS, json={"name": "bad", "filter": flt},
                                headers=team.headers("bob"))  # fmt: skip
    assert response.status_code in (400, 422), response.text
    assert set(response.json()) == {"error"} and response.json()["error"]["message"]
    with factory() as session:
        assert session.query(SavedView).count() == 0, "nothing half-written"


@pytest.mark.parametrize("name", ["", " ", "x" * 65, "tab\tin"])
def test_a_bad_name_is_refused(team: Team, name: str) -> None:
    response = team.client.post(VIEWS, json={"name": name}, headers=team.headers("bob"))
    assert response.status_code in (400, 422) and set(response.json()) == {"error"}


def test_a_name_taken_in_the_project_is_already_exists(team: Team) -> None:
    make(team, "bob", name="dup")
    again = team.client.post(VIEWS, json={"name": "dup"}, headers=team.headers("alice"))
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_exists"


def test_a_views_board_is_opened_by_readers_of_its_project_and_not_listed_as_a_compare_board(
    team: Team, factory: sessionmaker[Session]
) -> None:
    view = make(team, "bob", name="board", shared=True)
    slug = str(view["board_url"]).split("/")[2]
    assert team.client.get("/api/v1/compare", headers=team.headers("bob")).json() == []
    with transaction(factory) as session:
        set_membership(session, project="speech", user="carol", role=Role.viewer, actor="test")
    for who, status in (("carol", 200), ("eve", 403)):
        judged = team.client.get("/_auth/board", headers={
            **team.headers(who), "X-Tbhub-Original-Uri": f"/boards/{slug}/data/runs"})  # fmt: skip
        assert judged.status_code == status, (who, judged.text)
