"""Teams give their members project roles; OIDC groups keep team membership in step; a
disabled account, a password change and "sign out everywhere" end existing sessions on
pages, the API and the board gate. Both databases."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Role
from tbhub.core.settings import Settings
from tbhub.domain.teams import (
    add_member,
    create_team,
    grant,
    list_teams,
    remove_member,
    sync_groups,
)
from tbhub.domain.users import end_sessions, get_user, set_disabled, set_password
from tests.test_api import PASSWORD, auth, seed, sign_in


def test_a_team_role_gives_access_and_the_highest_role_wins(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)  # eve: no role anywhere; bob: editor of vision, viewer of speech
    with transaction(factory) as session:
        create_team(session, name="speech-team", actor="t")
        grant(session, project="speech", team="speech-team", role=Role.owner, actor="t")
        add_member(session, team="speech-team", user="eve", actor="t")
        add_member(session, team="speech-team", user="bob", actor="t")
    sign_in(client, "eve")
    assert [p["name"] for p in client.get("/api/v1/projects").json()] == ["speech"]
    assert client.get("/api/v1/projects/speech").json()["role"] == "owner"
    assert auth(client, "/boards/speech/")[0] == 200
    assert auth(client, "/boards/vision/")[0] == 403
    sign_in(client, "bob")  # his own viewer role and the team's owner role: owner
    assert client.get("/api/v1/projects/speech").json()["role"] == "owner"
    assert client.get("/api/v1/projects/speech/retention").status_code == 200

    with transaction(factory) as session:
        remove_member(session, team="speech-team", user="eve", actor="t")
    client.app.state.context.access.invalidate()  # type: ignore[attr-defined]
    sign_in(client, "eve")
    assert client.get("/api/v1/projects").json() == []
    assert auth(client, "/boards/speech/")[0] == 403


def test_oidc_groups_join_and_leave_only_the_synced_teams(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    mapping = {"ml-speech": "speech-team", "ml-vision": "vision-team"}
    with transaction(factory) as session:
        create_team(session, name="manual-team", actor="t")
        add_member(session, team="manual-team", user="eve", actor="t")
        eve = get_user(session, name="eve")
        sync_groups(session, user=eve, groups=("ml-speech", "other"), group_teams=mapping)
    with factory() as session:
        members = {t["name"]: [m["user"] for m in t["members"]] for t in list_teams(session)}
    assert members == {"manual-team": ["eve"], "speech-team": ["eve"]}
    with transaction(factory) as session:
        eve = get_user(session, name="eve")
        sync_groups(session, user=eve, groups=("ml-vision",), group_teams=mapping)
    with factory() as session:
        members = {t["name"]: [m["user"] for m in t["members"]] for t in list_teams(session)}
    assert members == {"manual-team": ["eve"], "speech-team": [], "vision-team": ["eve"]}


def test_disabling_ends_a_users_existing_session_everywhere(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    assert client.get("/api/v1/projects").status_code == 200
    assert auth(client, "/boards/vision/")[0] == 200
    with transaction(factory) as session:
        set_disabled(session, name="alice", disabled=True, actor="t")
    assert client.get("/api/v1/projects").status_code == 401  # at once: pages and API
    client.app.state.context.access.invalidate()  # the hook: within the cache's 10 s
    assert auth(client, "/boards/vision/")[0] == 401
    assert sign_in(client, "alice") == 401  # nor can a new one start
    with transaction(factory) as session:
        set_disabled(session, name="alice", disabled=False, actor="t")
    assert sign_in(client, "alice") == 303 and client.get("/api/v1/projects").status_code == 200


def test_sign_out_everywhere_and_a_new_password_end_old_sessions(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    for end in (
        lambda s: end_sessions(s, name="alice", actor="t"),
        lambda s: set_password(s, name="alice", password=PASSWORD, actor="t"),
    ):
        sign_in(client, "alice")
        old_cookie = client.cookies["tbhub_session"]
        with transaction(factory) as session:
            end(session)
        client.app.state.context.access.invalidate()  # type: ignore[attr-defined]
        assert client.get("/api/v1/projects").status_code == 401
        assert auth(client, "/boards/vision/")[0] == 401
        sign_in(client, "alice")  # a new session works
        assert client.cookies["tbhub_session"] != old_cookie
        assert client.get("/api/v1/projects").status_code == 200
