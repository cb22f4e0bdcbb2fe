"""Deleting a project: its runs go to the trash (nothing destroyed at once, restorable), its
rows go; only owners and admins may; the CLI asks first. Both databases."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.models import Membership, Project, ShareLink, TrashEntry
from tbhub.core.settings import Settings
from tbhub.housekeeping import trash
from tests.housekeeping.conftest import MakeRun, tree_digest
from tests.test_api import seed, sign_in


def count(factory: sessionmaker[Session], model: type) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_an_owner_deletes_a_project_and_its_runs_can_come_back(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, make_run: MakeRun
) -> None:
    seed(factory, settings)
    runs = [make_run("vision", path, age_days=1) for path in ("g/a", "g/b")]
    digests = [tree_digest(run) for run in runs]
    sign_in(client, "alice")
    client.post("/api/v1/projects/vision/retention/pins", json={"run": "g/a"})
    client.post("/api/v1/projects/vision/share-links", json={})
    sign_in(client, "bob")  # an editor may not
    assert client.delete("/api/v1/projects/vision").status_code == 403
    sign_in(client, "alice")
    response = client.delete("/api/v1/projects/vision")
    assert response.status_code == 200 and response.json()["trashed_runs"] == 2
    assert client.get("/api/v1/projects/vision").status_code == 404
    assert not any(run.exists() for run in runs)
    with factory() as session:
        names = set(session.scalars(select(Project.name)))
    assert names == {"speech"} and count(factory, ShareLink) == 0
    assert count(factory, Membership) == 1  # bob's role in speech
    assert count(factory, TrashEntry) == 2
    for ref in ("vision/g/a", "vision/g/b"):
        trash.restore(factory, settings, ref, actor="t")
    assert [tree_digest(run) for run in runs] == digests


def test_the_cli_deletes_only_with_yes(
    factory: sessionmaker[Session], settings: Settings, make_run: MakeRun, cli_env: dict[str, str]
) -> None:
    seed(factory, settings)
    run = make_run("vision", "g/a", age_days=1)
    runner = CliRunner()
    asked = runner.invoke(app, ["admin", "project", "delete", "vision"])
    assert asked.exit_code == 1 and "--yes" in asked.stderr
    assert run.exists() and count(factory, Project) == 2
    done = runner.invoke(app, ["admin", "project", "delete", "vision", "--yes", "--json"])
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["trashed_runs"] == 1
    assert not run.exists() and count(factory, Project) == 1
