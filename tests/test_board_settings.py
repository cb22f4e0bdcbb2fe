"""Per-project board settings, restart and stop over /api/v1 and the admin CLI, both databases."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, Board, BoardSettings, DesiredState
from tbhub.core.settings import Settings
from tbhub.domain.boards import request_board
from tbhub.domain.dashboards import SUGGESTED
from tbhub.domain.projects import get_project
from tbhub.supervisor.state import Limits, board_spec, read_desired
from tests.test_api import seed, sign_in
from tests.test_cli import cli_env, tbhub  # noqa: F401 - cli_env is a fixture

GiB = 1024**3


def test_owner_sets_board_settings_and_they_shape_the_spec(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303  # owner of vision
    before = board_spec("vision", str(settings.storage)).fingerprint
    response = client.put(
        "/api/v1/projects/vision/board/settings",
        json={"reload_interval": 5, "samples_per_plugin": "scalars=500", "plugins": ["projector"],
              "memory_limit": GiB, "pinned": True},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["settings"] == {
        "reload_interval": 5,
        "samples_per_plugin": "scalars=500",
        "memory_limit": GiB,
        "pinned": True,
        "plugins": ["projector"],
        "restricted_dashboards": [],
        "restricted_audience": "both",
    }
    assert body["memory_limit"] == GiB
    with transaction(factory) as session:
        for name in ("vision", "speech"):  # speech has no settings of its own
            project_id = get_project(session, name=name).id
            request_board(session, project_id=project_id, now=datetime.now(UTC))
        desired = read_desired(
            session,
            accesses={},
            now=datetime.now(UTC),
            idle_timeout=900,
            storage_root=str(settings.storage),
            limits=Limits(2 * GiB),
        ).desired
        own = session.get(BoardSettings, get_project(session, name="vision").id)
    spec = desired["vision"].spec
    assert spec.reload_interval == 5 and spec.samples_per_plugin == "scalars=500"
    assert spec.plugins == ("projector",)
    assert spec.fingerprint != before, "a process setting changes the spec: blue/green restart"
    assert desired["vision"].memory_limit == GiB and desired["vision"].pinned
    assert desired["speech"].memory_limit == 2 * GiB and not desired["speech"].pinned
    assert own is not None

    # Left out: unchanged; null: back to the default.
    body = client.put("/api/v1/projects/vision/board/settings",
                      json={"reload_interval": None}).json()  # fmt: skip
    assert body["settings"]["reload_interval"] is None
    assert body["settings"]["samples_per_plugin"] == "scalars=500"


@pytest.mark.parametrize(
    "bad",
    [
        {"reload_interval": 0},
        {"reload_interval": 10**12},
        {"reload_interval": True},
        {"reload_interval": 2.5},
        {"memory_limit": -1},
        {"memory_limit": 2**63},
        {"memory_limit": "1e999"},
        {"samples_per_plugin": "scalars=500;rm -rf"},
        {"samples_per_plugin": "x" * 300},
        {"pinned": 1},
        {"plugins": ["debugger"]},
        {"unknown_field": 1},
    ],
)
def test_bad_board_settings_get_422_and_change_nothing(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, bad: dict[str, object]
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    response = client.put("/api/v1/projects/vision/board/settings", json=bad)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"
    with factory() as session:
        assert session.scalar(select(BoardSettings)) is None


def test_only_owners_and_admins_manage_a_board(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    expected = {"alice": 200, "root": 200, "bob": 403, "eve": 404}  # owner, admin, editor, none
    for user, status in expected.items():
        assert sign_in(client, user) == 303
        assert client.get("/api/v1/projects/vision/board").status_code == status, user
        put = client.put("/api/v1/projects/vision/board/settings", json={"pinned": True})
        assert put.status_code == status, user
        assert client.post("/api/v1/projects/vision/board/restart").status_code == (
            202 if status == 200 else status
        )
    client.cookies.clear()
    assert client.get("/api/v1/projects/vision/board").status_code == 401


def test_restart_asks_for_a_blue_green_replacement_and_stop_for_a_stop(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    assert client.post("/api/v1/projects/vision/board/restart").status_code == 202
    with factory() as session:
        board = session.scalar(select(Board).where(Board.project_id == 1))
        assert board is not None
        assert board.desired_state == DesiredState.running
        assert board.restart_requested_at is not None
    assert client.post("/api/v1/projects/vision/board/stop").status_code == 202
    with factory() as session:
        board = session.scalar(select(Board).where(Board.project_id == 1))
        assert board is not None and board.desired_state == DesiredState.stopped
        actions = [e.action for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
    assert actions[-2:] == ["board.restart_request", "board.stop_request"]


def test_admin_board_cli_pins_sets_and_lists(cli_env: Settings) -> None:  # noqa: F811
    assert tbhub("db", "upgrade")[0] == 0
    assert tbhub("admin", "project", "create", "vision")[0] == 0
    code, out, _ = tbhub("admin", "board", "pin", "vision", "--json")
    assert code == 0 and json.loads(out)["settings"]["pinned"] is True
    code, out, _ = tbhub("admin", "board", "set", "vision", "--memory-limit", "1GiB",
                         "--reload-interval", "10", "--plugin", "projector", "--json")  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["settings"] == {"reload_interval": 10, "samples_per_plugin": None,
                                           "memory_limit": GiB, "pinned": True,
                                           "plugins": ["projector"],
                                           "restricted_dashboards": [],
                                           "restricted_audience": "both"}  # fmt: skip
    restrict = ("--restrict", "histograms", "--restrict", "graphs")
    code, out, _ = tbhub("admin", "board", "set", "vision", *restrict,
                         "--restrict-audience", "viewers", "--json")  # fmt: skip
    assert code == 0, out
    restricted = json.loads(out)["settings"]
    assert restricted["restricted_dashboards"] == ["graphs", "histograms"]
    assert restricted["restricted_audience"] == "viewers"
    code, out, _ = tbhub("admin", "board", "set", "vision", "--restrict-suggested", "--json")
    assert json.loads(out)["settings"]["restricted_dashboards"] == sorted(SUGGESTED)
    code, _, err = tbhub("admin", "board", "set", "vision", "--restrict", "profile")
    assert code != 0 and "unknown dashboard(s) 'profile'; restrict any of:" in err
    assert "profile_redirect" in err
    code, out, _ = tbhub("admin", "board", "set", "vision", "--no-restrict", "--json")
    assert json.loads(out)["settings"]["restricted_dashboards"] == []
    code, out, _ = tbhub("admin", "board", "list", "--json")
    [row] = json.loads(out)
    assert row["memory_limit"] == GiB and row["restarts"] == {} and row["pss_bytes"] is None
    code, out, _ = tbhub("admin", "board", "set", "vision", "--inherit", "memory_limit", "--json")
    assert json.loads(out)["settings"]["memory_limit"] is None
    assert tbhub("admin", "board", "restart", "vision")[0] == 0
    assert tbhub("admin", "board", "stop", "vision", "--json")[0] == 0
    assert tbhub("admin", "board", "unpin", "vision")[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--memory-limit", "lots"], "is not a size"),
        (["--reload-interval", "0"], "reload_interval must be a whole number"),
        (["--plugin", "debugger"], "unknown plugin"),
        (["--samples-per-plugin", "scalars"], "is not of the form"),
        ([], "nothing to change"),
    ],
)
def test_admin_board_set_refuses_bad_input_clearly(
    cli_env: Settings,  # noqa: F811
    args: list[str],
    message: str,
) -> None:
    assert tbhub("db", "upgrade")[0] == 0
    assert tbhub("admin", "project", "create", "vision")[0] == 0
    code, _, err = tbhub("admin", "board", "set", "vision", *args)
    assert code == 1 and err.startswith("error:") and message in err
    code, out, _ = tbhub("admin", "board", "status", "vision", "--json")
    assert json.loads(out)["settings"]["reload_interval"] is None


def test_the_projector_is_refused_where_boards_cannot_be_confined(
    client: TestClient,
    factory: sessionmaker[Session],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host whose kernel has no Landlock (the probe answers 0) cannot hold a board process
    to its project, so the projector is refused there with what to do; containers see their
    project alone and may have it."""
    import tbhub.supervisor.board_settings as board_settings

    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    monkeypatch.setattr(board_settings, "landlock_abi", lambda: 0)
    refused = client.put("/api/v1/projects/vision/board/settings", json={"plugins": ["projector"]})
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "no Landlock" in message and "TBHUB_BOARD_BACKEND=docker" in message
    with factory() as session:
        assert session.scalar(select(BoardSettings)) is None
    monkeypatch.setattr(settings, "board_backend", "docker")
    taken = client.put("/api/v1/projects/vision/board/settings", json={"plugins": ["projector"]})
    assert taken.status_code == 200 and taken.json()["settings"]["plugins"] == ["projector"]
