"""The projects page and project creation, in-process on both databases: the state words,
runs by status, storage against the quota, the search box, and who may create a project
(page form and API alike)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import (
    Board,
    DesiredState,
    Membership,
    ObservedState,
    Project,
    RetentionOverride,
    RetentionState,
    Role,
    Run,
    RunSource,
    RunStatus,
)
from tbhub.core.settings import Settings
from tbhub.domain.overview import board_state, run_state
from tbhub.serve.app import build_context, create_app
from tests.test_api import seed, sign_in

HTML = {"Accept": "text/html"}
EARLIER = datetime(2026, 2, 1, tzinfo=UTC)


def row_of(page: str, project: str) -> str:
    """The table row of `project` on the projects page."""
    for row in re.findall(r"<tr>.*?</tr>", page, flags=re.S):
        if f'href="/projects/{project}"' in row:
            return row
    raise AssertionError(f"no row for {project}")


@pytest.mark.parametrize(
    ("observed", "desired", "swapping", "failures", "word"),
    [
        (ObservedState.ready, DesiredState.running, False, 0, "live"),
        (ObservedState.ready, DesiredState.running, True, 0, "restarting"),
        (ObservedState.starting, DesiredState.running, False, 0, "starting"),
        (ObservedState.starting, DesiredState.running, False, 2, "restarting"),
        (ObservedState.stopped, DesiredState.running, False, 0, "starting"),
        (ObservedState.stopped, DesiredState.running, False, 1, "restarting"),
        (ObservedState.stopped, DesiredState.stopped, False, 0, "stopped"),
        (ObservedState.stopping, DesiredState.stopped, False, 0, "stopping"),
        (ObservedState.failed, DesiredState.running, False, 5, "failed"),
        (ObservedState.no_capacity, DesiredState.running, False, 0, "no-capacity"),
    ],
)
def test_board_state_word_follows_observed_and_desired_state(
    observed: ObservedState, desired: DesiredState, swapping: bool, failures: int, word: str
) -> None:
    board = Board(observed_state=observed, desired_state=desired, swapping=swapping,
                  failures=failures)  # fmt: skip
    assert board_state(board) == word


def test_a_running_run_without_new_writes_is_stalled_and_a_trashed_one_says_so() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    after = timedelta(minutes=30)
    run = Run(
        status=RunStatus.running,
        retention_state=RetentionState.present,
        created_at=now - timedelta(hours=2),
        last_write=now - timedelta(minutes=10),
    )
    assert run_state(run, now=now, stalled_after=after) == "running"
    run.last_write = now - timedelta(minutes=31)
    assert run_state(run, now=now, stalled_after=after) == "stalled"
    run.status = RunStatus.finished
    assert run_state(run, now=now, stalled_after=after) == "finished"
    run.retention_state = RetentionState.trashed
    assert run_state(run, now=now, stalled_after=after) == "trashed"


def _add_runs(factory: sessionmaker[Session], project: str, runs: list[tuple[str, int]]) -> None:
    with transaction(factory) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == project))
        for i, (status, size) in enumerate(runs):
            session.add(Run(project_id=project_id, path=f"r{i}", name=f"r{i}",
                            status=RunStatus(status), source=RunSource.api, hparams={},
                            metrics={}, created_by="alice", bytes=size,
                            created_at=EARLIER, updated_at=EARLIER,
                            last_write=datetime(2026, 3, 1, 10, i, tzinfo=UTC)))  # fmt: skip


def test_projects_page_shows_board_state_runs_by_status_and_storage_against_quota(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    _add_runs(factory, "vision", [("running", 1000), ("running", 1000), ("finished", 2048),
                                  ("failed", 0)])  # fmt: skip
    with transaction(factory) as session:
        vision = session.scalar(select(Project).where(Project.name == "vision"))
        assert vision is not None and vision.board is not None
        vision.board.observed_state = ObservedState.ready
        vision.board.desired_state = DesiredState.running
        session.add(RetentionOverride(project_id=vision.id, max_project_bytes=8192,
                                      updated_by="alice"))  # fmt: skip
    sign_in(client, "bob")  # editor of vision, viewer of speech
    page = client.get("/", headers=HTML)
    assert page.status_code == 200
    vision_row = row_of(page.text, "vision")
    assert 'data-board-state="vision"' in vision_row and ">live<" in vision_row
    assert "2 running" in vision_row and "1 finished" in vision_row and "1 failed" in vision_row
    assert "4.0 KiB of 8.0 KiB" in vision_row  # 1000 + 1000 + 2048 bytes, quota 8192
    assert 'datetime="2026-03-01T10:03:00Z"' in vision_row  # the newest last write
    assert ">editor<" in vision_row
    speech_row = row_of(page.text, "speech")
    assert ">stopped<" in speech_row and "no runs" in speech_row and "<meter" not in speech_row


def test_search_box_keeps_only_matching_projects(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    page = client.get("/", params={"q": "VIS"}, headers=HTML).text
    assert 'href="/projects/vision"' in page and 'href="/projects/speech"' not in page
    assert 'value="VIS"' in page
    none = client.get("/", params={"q": "<b>nothing</b>"}, headers=HTML).text
    assert "No project you can open matches “&lt;b&gt;nothing&lt;/b&gt;”" in none


def _create_form(client: TestClient, name: str) -> object:
    token = client.get("/", headers=HTML).text.split('name="csrf_token" value="')[1].split('"')[0]
    return client.post("/projects", data={"name": name, "csrf_token": token},
                       follow_redirects=False)  # fmt: skip


def test_only_admins_see_and_use_create_project_by_default(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    assert "Create a project" not in client.get("/", headers=HTML).text
    refused = _create_form(client, "alices")
    assert refused.status_code == 403  # type: ignore[attr-defined]
    assert "only instance admins create projects" in refused.text  # type: ignore[attr-defined]
    sign_in(client, "root")
    assert "Create a project" in client.get("/", headers=HTML).text
    made = _create_form(client, "roots")
    assert made.status_code == 303  # type: ignore[attr-defined]
    assert made.headers["location"] == "/projects/roots?notice=project_created"  # type: ignore[attr-defined]
    assert (settings.storage / "roots").is_dir()
    with factory() as session:
        names = set(session.scalars(select(Project.name)))
    assert names == {"vision", "speech", "roots"}


def test_a_bad_or_taken_name_comes_back_on_the_page_with_the_reason(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    taken = _create_form(client, "vision")
    assert taken.status_code == 409  # type: ignore[attr-defined]
    assert "already exists" in taken.text and 'aria-invalid="true"' in taken.text  # type: ignore[attr-defined]
    bad = _create_form(client, "Bad_Name")
    assert bad.status_code == 422  # type: ignore[attr-defined]
    assert 'value="Bad_Name"' in bad.text  # type: ignore[attr-defined]


def test_with_creation_open_to_anyone_a_user_creates_and_owns_a_project(
    settings: Settings, factory: sessionmaker[Session]
) -> None:
    seed(factory, settings)
    open_settings = settings.model_copy(update={"project_creation": "anyone"})
    with TestClient(create_app(build_context(open_settings))) as client:
        sign_in(client, "eve")
        assert "Create a project" in client.get("/", headers=HTML).text
        assert _create_form(client, "eves").status_code == 303  # type: ignore[attr-defined]
        made = client.post("/api/v1/projects", json={"name": "eves-api"})
        assert made.status_code == 201 and made.json()["role"] == "owner"
        assert client.get("/api/v1/projects/eves-api").status_code == 200  # in at once
        other = client.post("/api/v1/projects", json={"name": "for-bob", "owner": "bob"})
        assert other.status_code == 403
    with factory() as session:
        owners = session.execute(
            select(Project.name, Membership.role).join(Membership)
            .where(Project.name.in_(["eves", "eves-api", "for-bob"]))
        ).all()  # fmt: skip
    assert sorted(owners) == [("eves", Role.owner), ("eves-api", Role.owner)]


def test_an_admin_creates_a_project_for_another_owner_through_the_api(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    made = client.post("/api/v1/projects", json={"name": "bobs", "owner": "bob"})
    assert made.status_code == 201 and made.json()["role"] is None
    sign_in(client, "bob")
    assert client.get("/api/v1/projects/bobs").json()["role"] == "owner"
