"""The project's board page (/projects/<p>/board) in-process, on both databases: every member
sees which plugins are on, only owners get the buttons and may post them, a turned-on plugin
changes the board's spec (the supervisor replaces the board), and a refused change says why
on the page and writes nothing. (The flow in Chromium: tests/e2e/test_ui_board_plugins.py.)"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import AuditEvent, BoardSettings
from tbhub.supervisor.state import board_spec
from tests.api.conftest import Team
from tests.api.test_settings_forms import count, post_form

HTML = {"Accept": "text/html"}
PAGE = "/projects/vision/board"
FORM = "/projects/vision/board/plugins"
BUTTON = f'action="{FORM}"'


def plugins(factory: sessionmaker[Session]) -> list[str] | None:
    with factory() as session:
        own = session.scalars(select(BoardSettings)).one_or_none()
        return None if own is None else list(own.plugins or [])


def spec_of(factory: sessionmaker[Session], team: Team) -> str:
    """The fingerprint of vision's board as the supervisor would start it now."""
    with factory() as session:
        own = session.scalars(select(BoardSettings)).one_or_none()
        return board_spec("vision", str(team.settings.storage), own).fingerprint


def test_members_see_the_plugins_state_and_only_owners_get_the_buttons(team: Team) -> None:
    for who, owner in (("alice", True), ("root", True), ("bob", False), ("carol", False)):
        page = team.client.get(PAGE, headers={**team.headers(who), **HTML})
        assert page.status_code == 200, (who, page.text)
        assert '<tr data-plugin="projector">' in page.text and ">off</span>" in page.text
        assert (BUTTON in page.text) is owner, who
        assert ("Only a project owner turns them on or off: ask one." in page.text) is not owner
    assert team.client.get(PAGE, headers={**team.headers("eve"), **HTML}).status_code == 404


def test_a_viewer_or_editor_posting_the_toggle_gets_403_and_changes_nothing(
    team: Team, factory: sessionmaker[Session]
) -> None:
    before = count(factory, AuditEvent)
    for who in ("carol", "bob"):
        response = post_form(team, who, FORM, {"plugin": "projector", "state": "on"})
        assert response.status_code == 403, who  # type: ignore[attr-defined]
    assert plugins(factory) is None and count(factory, AuditEvent) == before


def test_the_form_needs_its_token(team: Team, factory: sessionmaker[Session]) -> None:
    headers = {**team.headers("alice"), **HTML}
    headers.pop("X-CSRF-Token")
    response = team.client.post(FORM, data={"plugin": "projector", "state": "on"},
                                headers=headers, follow_redirects=False)  # fmt: skip
    assert response.status_code == 403 and "reload the page" in response.text
    assert plugins(factory) is None


def test_an_owner_turns_the_projector_on_and_off_and_the_board_spec_follows(
    team: Team, factory: sessionmaker[Session]
) -> None:
    without = spec_of(factory, team)
    on = post_form(team, "alice", FORM, {"plugin": "projector", "state": "on"})
    assert on.status_code == 303  # type: ignore[attr-defined]
    assert on.headers["location"] == f"{PAGE}?notice=plugin_on#plugins-heading"  # type: ignore[attr-defined]
    assert plugins(factory) == ["projector"]
    assert spec_of(factory, team) != without  # the supervisor replaces the board
    page = team.client.get(PAGE, headers={**team.headers("alice"), **HTML}).text
    assert 'class="state-active">on</span>' in page and "Turn off" in page
    bar = team.client.get("/api/v1/boards/vision/bar", headers=team.headers("alice")).json()
    assert [p["name"] for p in bar["plugins_off"]] == ["pytorch_profiler"]  # off by default

    off = post_form(team, "alice", FORM, {"plugin": "projector", "state": "off"})
    assert off.status_code == 303 and plugins(factory) == []  # type: ignore[attr-defined]
    assert spec_of(factory, team) == without
    with factory() as session:
        changes = session.scalars(
            select(AuditEvent.detail).where(AuditEvent.action == "board.settings")
        ).all()
    assert [c["plugins"] for c in changes] == [["projector"], []]


@pytest.mark.parametrize(
    ("form", "status", "words"),
    [
        ({"plugin": "nosuch", "state": "on"}, 422, "the plugins a project can turn on: projector"),
        ({"plugin": "projector", "state": "maybe"}, 422, ""),
        ({"plugin": "x" * 65, "state": "on"}, 422, ""),
    ],
)
def test_a_bad_toggle_is_refused_and_writes_nothing(
    team: Team, factory: sessionmaker[Session], form: dict[str, str], status: int, words: str
) -> None:
    response = post_form(team, "alice", FORM, form)
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert words in response.text  # type: ignore[attr-defined]
    assert plugins(factory) is None


def test_where_boards_cannot_be_confined_the_page_says_so_and_what_to_do(
    team: Team, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel probe answers 0 (no Landlock): the projector is refused, the page shows the
    service's reason in its one error style, and nothing is written."""
    import tbhub.supervisor.board_settings as board_settings

    monkeypatch.setattr(board_settings, "landlock_abi", lambda: 0)
    before = count(factory, AuditEvent)
    refused = post_form(team, "alice", FORM, {"plugin": "projector", "state": "on"})
    assert refused.status_code == 422  # type: ignore[attr-defined]
    text = refused.text  # type: ignore[attr-defined]
    assert '<p class="error" role="alert">projector cannot be turned on here' in text
    assert "TBHUB_BOARD_BACKEND=docker" in text and "or leave it off" in text
    assert BUTTON in text  # the page is whole again, with its button
    assert plugins(factory) is None and count(factory, AuditEvent) == before
