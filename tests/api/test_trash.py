"""A project's trash over the API: members list it, editors restore from it, and a project
never sees (or restores) the trash of a deleted project that had its name."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, Role
from tbhub.domain.projects import create_project, set_membership
from tests.api.conftest import Team


def trash_a_run(team: Team, who: str) -> dict[str, object]:
    """Register a run (it gets its directory) and DELETE it; the run as the API shows it."""
    made = team.client.post(
        "/api/v1/projects/vision/runs", json={"name": "old"}, headers=team.headers(who)
    )
    assert made.status_code == 201, made.text
    run_id = made.json()["id"]
    trashed = team.client.delete(
        f"/api/v1/projects/vision/runs/{run_id}", headers=team.headers(who)
    )
    assert trashed.status_code == 200, trashed.text
    return trashed.json()  # type: ignore[no-any-return]


def test_an_editor_restores_a_trashed_run_to_its_place_and_the_registry(
    team: Team, factory: sessionmaker[Session]
) -> None:
    run = trash_a_run(team, "bob")
    run_dir = team.settings.storage / "vision" / str(run["path"])
    assert not run_dir.exists()

    listed = team.client.get("/api/v1/projects/vision/trash", headers=team.headers("carol"))
    assert listed.status_code == 200
    [entry] = listed.json()["entries"]
    assert (entry["id"], entry["run_path"]) == (run["trash_id"], run["path"])
    assert entry["reasons"] == ["deleted"] and entry["trashed_by"] == "bob"
    assert entry["purge_after"] > entry["trashed_at"]

    restored = team.client.post(
        f"/api/v1/projects/vision/trash/{entry['id']}/restore", headers=team.headers("bob")
    )
    assert restored.status_code == 200, restored.text
    assert run_dir.is_dir()
    again = team.client.get(
        f"/api/v1/projects/vision/runs/{run['id']}", headers=team.headers("bob")
    )
    assert again.json()["retention_state"] == "present"
    assert team.client.get("/api/v1/projects/vision/trash",
                           headers=team.headers("bob")).json()["entries"] == []  # fmt: skip
    with factory() as session:
        actors = session.scalars(
            select(AuditEvent.actor).where(AuditEvent.action == "trash.restore")
        ).all()
    assert actors == ["bob"]
    # Restored once: the id is no longer in the trash.
    twice = team.client.post(
        f"/api/v1/projects/vision/trash/{entry['id']}/restore", headers=team.headers("bob")
    )
    assert twice.status_code == 404


def test_a_new_project_never_sees_the_trash_of_a_deleted_one_with_its_name(
    team: Team, factory: sessionmaker[Session]
) -> None:
    run = trash_a_run(team, "alice")
    deleted = team.client.delete("/api/v1/projects/vision", headers=team.headers("alice"))
    assert deleted.status_code == 200, deleted.text
    with transaction(factory) as session:  # someone else makes a project of the same name
        create_project(session, name="vision", storage_root=team.settings.storage, owner=None,
                       actor="test")  # fmt: skip
        set_membership(session, project="vision", user="eve", role=Role.owner, actor="test")
    team.client.app.state.context.access.invalidate()  # type: ignore[attr-defined]

    h = team.headers("eve")
    assert team.client.get("/api/v1/projects/vision/trash", headers=h).json()["entries"] == []
    refused = team.client.post(f"/api/v1/projects/vision/trash/{run['trash_id']}/restore",
                               headers=h)  # fmt: skip
    assert refused.status_code == 404
    assert not (team.settings.storage / "vision" / str(run["path"])).exists()
