"""What tbhub's bar on a board page is told (GET /api/v1/boards/<p>/bar), in path mode and on
a board's own origin, and the signed-in header on error pages. Both databases."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.auth.board_origin import BoardSession
from tbhub.auth.sessions import SESSION_COOKIE
from tbhub.auth.user_sessions import start_session
from tbhub.core.db import transaction
from tbhub.core.models import Project, Run
from tbhub.core.settings import Settings
from tbhub.domain.runs import RunFields, register_run
from tbhub.domain.users import get_user
from tbhub.serve.app import build_context, create_app
from tbhub.supervisor.board_process import OFF_BY_DEFAULT_PLUGINS
from tests.test_api import seed, sign_in

HTML = {"Accept": "text/html"}


def add_run(factory: sessionmaker[Session], settings: Settings, *, files: int) -> None:
    with factory() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
    assert project_id is not None
    fields = RunFields(hparams={}, tags=[])
    run = register_run(factory, storage_root=settings.storage, project="vision",
                       project_id=project_id, name="r", group=None, fields=fields,
                       actor="test")  # fmt: skip
    with transaction(factory) as session:
        stored = session.get(Run, run.id)
        assert stored is not None
        stored.files = files


def test_a_member_is_told_who_they_are_where_tbhub_is_and_where_runs_go(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "bob")  # an editor of vision
    bar = client.get("/api/v1/boards/vision/bar")
    assert bar.status_code == 200
    context = client.app.state.context  # type: ignore[attr-defined]
    assert bar.json() == {
        "project": "vision",
        "kind": "project",
        "title": "vision",
        "user": "bob",
        "shared": False,
        "home": settings.public_url.rstrip("/"),
        "page": "/projects/vision",
        "csrf_token": context.csrf.token(client.cookies[SESSION_COOKIE]),
        "runs": 0,
        "logdir": str(settings.storage / "vision"),
        "run_command": "tbhub run --project vision -- python train.py",
        # An editor is told to ask an owner, with no link to a page he may not use.
        "plugins_off": [
            {
                "name": name,
                "why": why,
                "how": "a project owner turns it on: ask one",
                "toggle": None,
            }
            for name, why in sorted(OFF_BY_DEFAULT_PLUGINS.items())
        ],
        "plugin_errors": [],  # the board's status names no plugin that failed to load
        "whole_project": None,  # a project board is the whole project
    }
    # A registered run without files is not yet something a board shows; one with files is.
    add_run(factory, settings, files=0)
    assert client.get("/api/v1/boards/vision/bar").json()["runs"] == 0
    add_run(factory, settings, files=2)
    assert client.get("/api/v1/boards/vision/bar").json()["runs"] == 1
    # An owner gets the page that turns it on.
    sign_in(client, "alice")
    [off] = [p for p in client.get("/api/v1/boards/vision/bar").json()["plugins_off"]
             if p["name"] == "projector"]  # fmt: skip
    assert off["toggle"] == "/projects/vision/board#plugins-heading"
    assert off["how"] == (
        "turn it on on this project's Board page, or with: tbhub admin board set vision "
        "--plugin projector"
    )
    assert client.get(off["toggle"].split("#")[0], headers=HTML).status_code == 200
    # Turned on, the projector is no longer named as missing.
    turned = client.put("/api/v1/projects/vision/board/settings", json={"plugins": ["projector"]})
    assert turned.status_code == 200, turned.text
    still = client.get("/api/v1/boards/vision/bar").json()["plugins_off"]
    assert [p["name"] for p in still] == ["pytorch_profiler"]


def test_a_compare_boards_bar_names_it_and_links_to_the_compare_boards(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    add_run(factory, settings, files=1)
    sign_in(client, "alice")
    run_id = client.get("/api/v1/projects/vision/runs").json()["runs"][0]["id"]
    made = client.post("/api/v1/compare", json={"runs": [f"vision/{run_id}"], "name": "lr sweep"})
    assert made.status_code == 201, made.text
    slug = made.json()["slug"]
    bar = client.get(f"/api/v1/boards/{slug}/bar").json()
    assert (bar["kind"], bar["title"], bar["page"]) == ("compare", "lr sweep", "/compare")
    assert bar["project"] == slug and bar["logdir"] is None


def test_outsiders_get_what_the_board_gate_gives_them(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert client.get("/api/v1/boards/vision/bar").status_code == 401
    sign_in(client, "eve")  # a member of nothing
    for project in ("vision", "nosuch"):
        refused = client.get(f"/api/v1/boards/{project}/bar")
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"


def test_on_a_boards_own_origin_the_bar_points_at_tbhubs_origin_without_a_token(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    seed(factory, settings)
    settings.board_domain = "boards.test"
    context = build_context(settings)
    assert context.board_origins is not None
    expires_at = int(time.time()) + 600
    with transaction(factory) as session:
        alice_id = get_user(session, name="alice").id
        session_id = start_session(session, user_id=alice_id, expires_at=expires_at)
    cookie = context.board_origins.cookie_value(
        BoardSession(alice_id, "vision", 0, expires_at, session_id)
    )
    with TestClient(create_app(context), base_url="http://vision.boards.test") as client:
        bar = client.get("/api/v1/boards/vision/bar", headers={
            "Cookie": f"{context.cookies.board}={cookie}"})  # fmt: skip
        assert bar.status_code == 200
        assert bar.json()["user"] == "alice"
        assert bar.json()["home"] == settings.public_url.rstrip("/")
        assert bar.json()["csrf_token"] is None  # sign-out happens on tbhub's origin
        # The board cookie is for vision's origin only.
        assert client.get("/api/v1/boards/speech/bar", headers={
            "Cookie": f"{context.cookies.board}={cookie}"}).status_code == 404  # fmt: skip
    context.engine.dispose()


def test_error_pages_keep_the_signed_in_header(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    anonymous = client.get("/no/such/page", headers=HTML)
    assert anonymous.status_code == 404 and "Sign out" not in anonymous.text
    sign_in(client, "root")
    for path, status in (("/no/such/page", 404), ("/admin/boards/nosuch/restart", 405)):
        page = client.get(path, headers=HTML)
        assert page.status_code == status
        assert '<span class="who">root' in page.text and 'href="/admin"' in page.text
        # The header's sign-out form carries this session's token.
        token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
        csrf = client.app.state.context.csrf  # type: ignore[attr-defined]
        assert token == csrf.token(client.cookies[SESSION_COOKIE])
    sign_in(client, "alice")
    forbidden = client.get("/admin", headers=HTML)
    assert forbidden.status_code == 403 and '<span class="who">alice' in forbidden.text
