"""The project settings pages' forms in-process, on both databases: who may post them, and
a form the service refuses shows why on the page and writes nothing. (The flows themselves
run in Chromium: tests/e2e/test_ui_settings.py.)"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import ApiToken, AuditEvent, Membership
from tests.api.conftest import Team, one_connection_client

HTML = {"Accept": "text/html"}


def post_form(team: Team, who: str, path: str, data: dict[str, str | list[str]]) -> object:
    headers = {**team.headers(who), **HTML}
    token = headers.pop("X-CSRF-Token")  # a form sends its token as a field, not a header
    return team.client.post(path, data={**data, "csrf_token": token}, headers=headers,
                            follow_redirects=False)  # fmt: skip


def count(factory: sessionmaker[Session], table: type) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(table)) or 0)


def test_only_owners_open_the_members_and_share_pages(team: Team) -> None:
    for path in ("/projects/vision/members", "/projects/vision/share"):
        got = {
            who: team.client.get(path, headers={**team.headers(who), **HTML}).status_code
            for who in ("alice", "root", "bob", "carol", "eve")
        }
        assert got == {"alice": 200, "root": 200, "bob": 403, "carol": 403, "eve": 404}, path


def test_a_viewer_posting_an_owners_form_gets_403_and_changes_nothing(
    team: Team, factory: sessionmaker[Session]
) -> None:
    before = (count(factory, Membership), count(factory, AuditEvent))
    forms = {
        "/projects/vision/members": {"member": "eve", "role": "owner"},
        "/projects/vision/members/carol/role": {"role": "owner"},
        "/projects/vision/teams": {"team": "crew", "role": "owner"},
        "/projects/vision/share": {"expires": "24"},
        "/projects/vision/retention": {"keep_last": "1"},
    }
    for path, data in forms.items():
        response = post_form(team, "carol", path, data)
        assert response.status_code == 403, (path, response.text)  # type: ignore[attr-defined]
    assert (count(factory, Membership), count(factory, AuditEvent)) == before


def test_a_refused_member_form_says_why_and_writes_nothing(
    team: Team, factory: sessionmaker[Session]
) -> None:
    before = (count(factory, Membership), count(factory, AuditEvent))
    response = post_form(team, "alice", "/projects/vision/members",
                         {"member": "nobody", "role": "viewer"})  # fmt: skip
    assert response.status_code == 404  # type: ignore[attr-defined]
    text = response.text  # type: ignore[attr-defined]
    assert 'role="alert"' in text and "nobody" in text
    assert 'value="nobody"' in text  # the form keeps what was typed
    assert (count(factory, Membership), count(factory, AuditEvent)) == before


def test_a_token_form_never_grants_more_than_the_users_role(
    team: Team, factory: sessionmaker[Session]
) -> None:
    before = count(factory, ApiToken)
    response = post_form(team, "carol", "/settings/tokens",
                         {"name": "job", "scope": "write", "projects": ["vision"],
                          "expires": "7"})  # fmt: skip
    assert response.status_code == 403  # type: ignore[attr-defined]
    assert "not at least editor of vision" in response.text  # type: ignore[attr-defined]
    assert count(factory, ApiToken) == before

    response = post_form(team, "carol", "/settings/tokens",
                         {"name": "job", "scope": "read", "projects": ["vision"],
                          "expires": "custom", "custom_days": "0.5"})  # fmt: skip
    assert response.status_code == 200  # type: ignore[attr-defined]
    assert response.headers["cache-control"] == "no-store"  # type: ignore[attr-defined]
    secret = response.text.split('id="new-token" class="secret" readonly value="')[1][:47]  # type: ignore[attr-defined]
    me = team.client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"}).json()
    assert me["user"] == "carol" and me["token"]["scope"] == "read"
    assert count(factory, ApiToken) == before + 1


def test_a_form_in_a_transaction_of_its_own_needs_one_database_connection_at_a_time(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's form signed in by cookie reads its user apart from the request's session, so
    the form's own transaction (web/render.attempt) takes the pool's one connection."""
    with one_connection_client(team, monkeypatch) as client:
        own = Team(client=client, settings=team.settings, user_ids=team.user_ids)
        response = post_form(own, "alice", "/settings/tokens",
                             {"name": "job", "scope": "read", "projects": ["vision"],
                              "expires": "7"})  # fmt: skip
    assert response.status_code == 200, response.text  # type: ignore[attr-defined]
    assert 'id="new-token"' in response.text  # type: ignore[attr-defined]
