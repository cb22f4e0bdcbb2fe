"""Restricted dashboards in-process, on both databases: who reads and who sets the restriction
(API and the share page's form), what is refused and why, and which board requests ask for
which dashboard. (Through nginx and a real TensorBoard: the e2e test of the same name.)"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import BoardSettings
from tbhub.domain.dashboards import (
    DASHBOARDS,
    SUGGESTED,
    Restriction,
    asks_denied,
    dashboards_of,
    is_listing,
)
from tests.api.conftest import Team
from tests.api.test_settings_forms import post_form

SETTINGS = "/api/v1/projects/vision/board/settings"
RESTRICTIONS = "/api/v1/projects/vision/board/restrictions"


def test_members_read_the_restriction_and_others_do_not_learn_the_project(team: Team) -> None:
    got = {who: team.client.get(RESTRICTIONS, headers=team.headers(who)).status_code
           for who in ("alice", "bob", "carol", "root", "eve", None)}  # fmt: skip
    assert got == {"alice": 200, "bob": 200, "carol": 200, "root": 200, "eve": 404, None: 401}
    body = team.client.get(RESTRICTIONS, headers=team.headers("carol")).json()
    assert body == {"project": "vision", "dashboards": [], "audience": "both",
                    "suggested": list(SUGGESTED), "available": sorted(DASHBOARDS)}  # fmt: skip


def test_only_owners_set_it_and_every_reader_then_sees_it(team: Team) -> None:
    change = {"restricted_dashboards": ["histograms", "graphs"], "restricted_audience": "viewers"}
    for who, status in (("carol", 403), ("bob", 403), ("eve", 404), ("alice", 200)):
        answer = team.client.put(SETTINGS, json=change, headers=team.headers(who))
        assert answer.status_code == status, (who, answer.text)
    seen = team.client.get(RESTRICTIONS, headers=team.headers("bob")).json()
    assert (seen["dashboards"], seen["audience"]) == (["graphs", "histograms"], "viewers")
    lifted = team.client.put(SETTINGS, json={"restricted_dashboards": []},
                             headers=team.headers("alice"))  # fmt: skip
    assert lifted.json()["settings"]["restricted_dashboards"] == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"restricted_dashboards": ["histogram"]},
            "unknown dashboard(s) 'histogram'; restrict any",
        ),
        ({"restricted_dashboards": ["x" * 65]}, "at most 64 characters"),
        ({"restricted_audience": "everyone"}, "viewers"),
        (
            {"restricted_dashboards": ["scalars"] * (len(DASHBOARDS) + 1)},
            f"at most {len(DASHBOARDS)} items",
        ),
    ],
)
def test_a_bad_restriction_is_refused_with_what_to_send(
    team: Team, change: dict[str, object], words: str
) -> None:
    answer = team.client.put(SETTINGS, json=change, headers=team.headers("alice"))
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_input" and words in answer.text


def test_the_share_page_offers_the_suggested_set_and_saves_the_owners_choice(
    team: Team, factory: sessionmaker[Session]
) -> None:
    page = team.client.get("/projects/vision/share", headers={**team.headers("alice")}).text
    assert 'id="dashboards-heading"' in page
    assert 'value="histograms" checked' in page and 'value="scalars" checked' not in page
    assert "Now every reader sees every dashboard" in page
    form = {"dashboard": ["mesh", "text"], "audience": "share_links"}
    assert post_form(team, "carol", "/projects/vision/share/dashboards", form).status_code == 403  # type: ignore[attr-defined]
    saved = post_form(team, "alice", "/projects/vision/share/dashboards", form)
    assert saved.status_code == 303  # type: ignore[attr-defined]
    with factory() as session:
        own = session.scalars(select(BoardSettings)).one()
        assert (own.restricted_dashboards, own.restricted_audience) == (["mesh", "text"],
                                                                        "share_links")  # fmt: skip
    page = team.client.get("/projects/vision/share", headers=team.headers("alice")).text
    assert "Now kept from share links: mesh, text." in page
    refused = post_form(team, "alice", "/projects/vision/share/dashboards",
                        {"dashboard": ["nope"], "audience": "both"})  # fmt: skip
    assert refused.status_code == 422  # type: ignore[attr-defined]
    assert "unknown dashboard(s) &#39;nope&#39;" in refused.text  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("rest", "asked"),
    [
        ("/data/plugin/histograms/tags", {"histograms"}),
        ("/data/plugin/histograms/tags/", {"histograms"}),
        ("/experiment/e1/data/plugin/graphs/graph?run=a", {"graphs"}),
        ("/data/plugin/histo%67rams/histograms?run=a", {"histograms"}),
        ("/data/plugin/scalars/scalars?format=csv&run=a&tag=b", {"scalars"}),
        ("/data/plugin_entry.html?name=projector", {"projector"}),
        ("/data/plugin_entry.html?name=scalars&name=mesh", {"scalars", "mesh"}),
        ("/data/plugin_ent%72y.html?name=mesh", {"mesh"}),
        ("/data/runs", set()),
        ("/data/plugins_listing", set()),
        ("/", set()),
        ("/index.js?x=/data/plugin/histograms/", set()),
    ],
)
def test_which_dashboard_a_board_request_asks_for(rest: str, asked: set[str]) -> None:
    assert dashboards_of(rest) == asked


def test_time_series_is_kept_from_an_audience_kept_from_any_kind_it_carries() -> None:
    restriction = Restriction(frozenset({"histograms"}), "viewers")
    assert restriction.denied(share_link=False) == {"histograms", "timeseries"}
    assert restriction.denied(share_link=True) == frozenset()
    assert Restriction(frozenset({"graphs"}), "both").denied(share_link=True) == {"graphs"}
    denied = restriction.denied(share_link=False)
    assert asks_denied("/data/plugin/timeseries/timeSeries", denied) == "timeseries"
    assert asks_denied("/data/plugin/scalars/scalars", denied) is None
    assert is_listing("/experiment/x/data/plugins_listing") and not is_listing("/data/runs")


def test_the_hook_refuses_a_restricted_route_to_the_audience_only(team: Team) -> None:
    """The hook in-process: who gets a restricted route, by session and by token (a token
    reads as its user: an editor's read token sees everything)."""
    change = {"restricted_dashboards": ["histograms"], "restricted_audience": "viewers"}
    assert team.client.put(SETTINGS, json=change, headers=team.headers("alice")).status_code == 200

    def hook(who: str, uri: str) -> int:
        headers = {**team.headers(who), "X-Tbhub-Original-Uri": uri}
        return team.client.get("/_auth/board", headers=headers).status_code

    restricted = "/boards/vision/experiment/e/data/plugin/histo%67rams/tags"
    series = "/boards/vision/data/plugin/timeseries/timeSeries"
    kept = "/boards/vision/data/plugin/scalars/tags"
    got = {who: (hook(who, restricted), hook(who, series), hook(who, kept))
           for who in ("alice", "bob", "carol", "root", "bob-read")}  # fmt: skip
    assert got == {"alice": (200, 200, 200), "bob": (200, 200, 200), "carol": (403, 403, 200),
                   "root": (200, 200, 200), "bob-read": (200, 200, 200)}  # fmt: skip


def test_the_hook_says_its_answer_holds_for_the_whole_board_only_when_nothing_is_kept(
    team: Team,
) -> None:
    """X-Board-Scope: board lets nginx admit the board's other routes on one answer for the
    same caller; a caller kept from a dashboard gets an answer for the route judged only."""

    def scopes(uri: str) -> dict[str, str | None]:
        answers = {
            who: team.client.get(
                "/_auth/board", headers={**team.headers(who), "X-Tbhub-Original-Uri": uri}
            )
            for who in ("alice", "carol")
        }
        assert {who: a.status_code for who, a in answers.items()} == {"alice": 200, "carol": 200}
        return {who: a.headers.get("X-Board-Scope") for who, a in answers.items()}  # fmt: skip

    kept = "/boards/vision/data/plugin/scalars/tags"
    assert scopes(kept) == {"alice": "board", "carol": "board"}
    change = {"restricted_dashboards": ["histograms"], "restricted_audience": "viewers"}
    assert team.client.put(SETTINGS, json=change, headers=team.headers("alice")).status_code == 200
    # carol views vision: the histograms routes are refused her, so no answer of hers may
    # stand for them; alice owns it and is kept from nothing.
    assert scopes(kept) == {"alice": "board", "carol": None}
    assert scopes("/boards/vision/") == {"alice": "board", "carol": None}
