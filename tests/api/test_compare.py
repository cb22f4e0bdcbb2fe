"""/api/v1/compare over both databases: compare boards over runs of several projects, each
run refused as not found unless the caller can read it, and the board readable only by
those who can read every run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import InvalidInput
from tbhub.core.models import CompareBoard, Role
from tbhub.domain.projects import create_project, remove_membership, set_membership
from tests.api.conftest import Team

COMPARE = "/api/v1/compare"


def register(team: Team, project: str, name: str = "run-01") -> int:
    response = team.client.post(
        f"/api/v1/projects/{project}/runs", json={"name": name}, headers=team.headers("root")
    )
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def grant(factory: sessionmaker[Session], project: str, user: str, role: Role) -> None:
    with transaction(factory) as session:
        set_membership(session, project=project, user=user, role=role, actor="test")


def test_a_compare_board_over_runs_of_two_projects_names_each_run_by_its_project(
    team: Team, factory: sessionmaker[Session]
) -> None:
    grant(factory, "speech", "carol", Role.viewer)
    vision, speech = register(team, "vision"), register(team, "speech")
    body = {"runs": [f"vision/{vision}", f"speech/{speech}"], "name": "lr sweep"}
    made = team.client.post(COMPARE, json=body, headers=team.headers("carol"))
    assert made.status_code == 201, made.text
    board = made.json()
    assert board["slug"].startswith("cmp-") and board["board_url"] == f"/boards/{board['slug']}/"
    assert board["owner"] == "carol" and board["name"] == "lr sweep" and board["readable"]
    shown = [run["board_run"] for run in board["runs"]]
    assert [s.split("/")[0] for s in shown] == ["vision", "speech"], "prefixed by project"
    assert shown[0].endswith("-run-01") and shown[1].endswith("-run-01")

    again = team.client.post(
        COMPARE, json={"runs": body["runs"][::-1]}, headers=team.headers("carol")
    )
    assert again.status_code == 200 and again.json()["slug"] == board["slug"], "same runs"
    listed = team.client.get(COMPARE, headers=team.headers("carol")).json()
    assert [b["slug"] for b in listed] == [board["slug"]]


def test_a_run_the_caller_cannot_read_is_refused_exactly_like_one_that_does_not_exist(
    team: Team,
) -> None:
    vision, speech = register(team, "vision"), register(team, "speech")
    answers = {
        ref: team.client.post(
            COMPARE, json={"runs": [f"vision/{vision}", ref]}, headers=team.headers("bob")
        )
        for ref in (f"speech/{speech}", "nosuch/1", f"vision/{speech}", f"vision/{speech + 99}")
    }
    assert {r: a.status_code for r, a in answers.items()} == dict.fromkeys(answers, 404)
    assert "speech" not in answers[f"vision/{speech}"].text, "no hint where the run lives"
    unreadable = answers[f"speech/{speech}"].json()["error"]
    missing = answers["nosuch/1"].json()["error"]
    assert unreadable["code"] == missing["code"] == "not_found"
    assert unreadable["message"].replace("speech", "nosuch") == missing["message"]
    for bad in ([], ["vision"], ["vision/0"], ["Vision/1"], ["vision/1/2"]):
        answer = team.client.post(COMPARE, json={"runs": bad}, headers=team.headers("bob"))
        assert answer.status_code == 422, (bad, answer.text)
    with_token = team.client.post(
        COMPARE, json={"runs": [f"speech/{speech}"]}, headers=team.headers("bob-read")
    )
    assert with_token.status_code == 404


def test_only_who_can_read_every_run_sees_the_board_and_only_its_owner_deletes_it(
    team: Team, factory: sessionmaker[Session]
) -> None:
    grant(factory, "speech", "alice", Role.viewer)
    runs = [f"vision/{register(team, 'vision')}", f"speech/{register(team, 'speech')}"]
    slug = team.client.post(COMPARE, json={"runs": runs}, headers=team.headers("dave-write-speech"))
    assert slug.status_code == 404, "dave's token reads speech only"
    made = team.client.post(COMPARE, json={"runs": runs}, headers=team.headers("alice"))
    slug = made.json()["slug"]
    seen = {
        who: team.client.get(f"{COMPARE}/{slug}", headers=team.headers(who)).status_code
        for who in ("alice", "root", "carol", "dave", "bob-read")
    }
    assert seen == {"alice": 200, "root": 200, "carol": 404, "dave": 404, "bob-read": 404}

    grant(factory, "speech", "carol", Role.viewer)
    team.client.app.state.context.access.invalidate()  # type: ignore[attr-defined]
    assert team.client.get(f"{COMPARE}/{slug}", headers=team.headers("carol")).status_code == 200
    assert team.client.delete(f"{COMPARE}/{slug}", headers=team.headers("carol")).status_code == 403
    renamed = team.client.patch(
        f"{COMPARE}/{slug}", json={"name": "mine"}, headers=team.headers("alice")
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "mine"
    assert team.client.delete(f"{COMPARE}/{slug}", headers=team.headers("alice")).status_code == 204
    assert team.client.get(f"{COMPARE}/{slug}", headers=team.headers("alice")).status_code == 404
    with transaction(factory) as session:
        assert session.scalar(select(CompareBoard)) is None


def test_a_board_whose_owner_lost_a_project_is_listed_without_its_runs(
    team: Team, factory: sessionmaker[Session]
) -> None:
    grant(factory, "speech", "carol", Role.viewer)
    runs = [f"vision/{register(team, 'vision')}", f"speech/{register(team, 'speech')}"]
    slug = team.client.post(COMPARE, json={"runs": runs}, headers=team.headers("carol")).json()
    with transaction(factory) as session:
        remove_membership(session, project="speech", user="carol", actor="test")
    team.client.app.state.context.access.invalidate()  # type: ignore[attr-defined]
    listed = team.client.get(COMPARE, headers=team.headers("carol")).json()
    assert [(b["slug"], b["readable"], b["runs"], b["run_count"]) for b in listed] == [
        (slug["slug"], False, [], 2)
    ]
    assert (
        team.client.get(f"{COMPARE}/{slug['slug']}", headers=team.headers("carol")).status_code
        == 404
    )


def test_a_run_whose_directory_leads_outside_its_project_is_refused(
    team: Team, tmp_path: Path
) -> None:
    run_id = register(team, "vision")
    logdir = Path(
        team.client.get(
            f"/api/v1/projects/vision/runs/{run_id}", headers=team.headers("root")
        ).json()["logdir"]
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(logdir)
    logdir.symlink_to(outside)
    answer = team.client.post(
        COMPARE, json={"runs": [f"vision/{run_id}"]}, headers=team.headers("alice")
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "unsafe_path"
    assert "leads outside its project" in answer.json()["error"]["message"]


def test_no_project_may_take_the_shape_of_a_compare_boards_name(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    with transaction(factory) as session:
        with pytest.raises(InvalidInput, match="shape of a compare board's name"):
            create_project(
                session, name="cmp-0123456789ab", storage_root=tmp_path, owner=None, actor="test"
            )
        create_project(session, name="cmp-vision", storage_root=tmp_path, owner=None, actor="test")


def test_admins_see_compare_boards_among_the_boards_and_in_metrics(
    team: Team, factory: sessionmaker[Session]
) -> None:
    grant(factory, "speech", "carol", Role.viewer)
    body = {"runs": [f"vision/{register(team, 'vision')}", f"speech/{register(team, 'speech')}"]}
    made = team.client.post(COMPARE, json=body, headers=team.headers("carol"))
    slug = made.json()["slug"]
    boards = team.client.get("/api/v1/boards", headers=team.headers("root"))
    assert boards.status_code == 200, boards.text
    rows = {row["project"]: row for row in boards.json()["boards"]}
    assert rows["vision"]["kind"] == "project" and rows[slug]["kind"] == "compare"
    assert rows[slug]["desired"] == "stopped" and rows[slug]["memory_limit"] is not None
    listed = team.client.get("/api/v1/boards", headers=team.headers("carol"))
    assert listed.status_code == 403, "only admins list every board"
    metrics = team.client.get("/metrics").text
    assert f'tbhub_board_memory_limit_bytes{{project="{slug}"}}' in metrics
