"""Retention policies over /api/v1 and backup figures on /metrics, in-process, both databases."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent, BackupRun
from tbhub.core.settings import Settings
from tbhub.housekeeping import backup
from tests.housekeeping.conftest import EVENTS, fill_storage
from tests.ports import free_port
from tests.support.metrics_text import sample
from tests.test_api import seed, sign_in
from tests.times import assert_one_format


def test_owners_read_and_set_their_project_policy(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303  # owner of vision
    response = client.put("/api/v1/projects/vision/retention",
                          json={"keep_last": 3, "action": "archive"})  # fmt: skip
    assert response.status_code == 200
    body = response.json()
    assert body["overrides"]["keep_last"] == 3 and body["effective"]["action"] == "archive"
    response = client.put("/api/v1/projects/vision/retention", json={"keep_last": None})
    assert response.json()["overrides"]["keep_last"] is None
    assert response.json()["overrides"]["action"] == "archive"  # left out: unchanged
    assert client.get("/api/v1/projects/vision/retention").json()["effective"]["keep_last"] is None
    with factory() as session:
        events = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "retention.policy")
        ).all()
    assert [e.actor for e in events] == ["alice", "alice"]


def test_editors_are_refused_and_non_members_see_nothing(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert client.get("/api/v1/projects/vision/retention").status_code == 401
    sign_in(client, "bob")  # editor of vision
    response = client.put("/api/v1/projects/vision/retention", json={"keep_last": 1})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    sign_in(client, "eve")
    assert client.get("/api/v1/projects/vision/retention").status_code == 404
    assert client.get("/api/v1/retention/default").status_code == 403
    sign_in(client, "root")  # instance admin
    assert client.put("/api/v1/projects/vision/retention", json={"keep_last": 1}).status_code == 200
    assert client.get("/api/v1/retention/default").json()["action"] == "trash"


def test_bad_policy_values_get_a_422_naming_the_field(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")
    response = client.put("/api/v1/projects/vision/retention", json={"keep_last": -2})
    assert response.status_code == 422
    assert "keep_last" in response.json()["error"]["message"]


def test_pins_and_the_dry_run_through_the_api(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    for i, age in enumerate((1, 2, 3)):
        run = settings.storage / "vision" / f"r{i}"
        run.mkdir(parents=True)
        (run / EVENTS).write_bytes(b"x" * 10)
        stamp = time.time() - age * 86400
        os.utime(run / EVENTS, (stamp, stamp))
    sign_in(client, "alice")
    client.put("/api/v1/projects/vision/retention", json={"keep_last": 1})
    assert (
        client.post("/api/v1/projects/vision/retention/pins", json={"run": "r2"}).status_code == 201
    )
    plan = client.get("/api/v1/projects/vision/retention/plan").json()
    assert [r["path"] for r in plan["runs"]] == ["r1"]
    assert (plan["remove_bytes"], plan["skipped_pinned"]) == (10, 1)
    assert client.delete("/api/v1/projects/vision/retention/pins/r2").status_code == 204
    plan = client.get("/api/v1/projects/vision/retention/plan").json()
    assert [r["path"] for r in plan["runs"]] == ["r2", "r1"]
    assert client.delete("/api/v1/projects/vision/retention/pins/r2").status_code == 404


def metric(text: str, name: str) -> float | None:
    return sample(text, name)


def test_metrics_report_the_recovery_point_and_the_last_result(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    text = client.get("/metrics").text
    assert "# TYPE tbhub_backup_last_complete_age_seconds gauge" in text
    assert metric(text, "tbhub_backup_last_complete_age_seconds") is None
    seed(factory, settings)
    fill_storage(settings, runs=1)
    settings.backup_target = str(tmp_path / "backup")
    backup.run_backup(factory, settings, actor="t")
    text = client.get("/metrics").text
    assert 0 <= metric(text, "tbhub_backup_last_complete_age_seconds") < 60  # type: ignore[operator]
    assert metric(text, "tbhub_backup_last_run_success") == 1
    with transaction(factory) as session:
        session.add(BackupRun(target="x", snapshot="", state="failed", actor="t",
                              finished_at=backup.datetime.now(backup.UTC)))  # fmt: skip
    text = client.get("/metrics").text
    assert metric(text, "tbhub_backup_last_run_success") == 0
    assert metric(text, "tbhub_backup_last_complete_age_seconds") is not None


def test_admins_read_the_backups_snapshots_last_run_and_recovery_point(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    seed(factory, settings)
    sign_in(client, "root")
    assert client.get("/api/v1/backups").json() == {
        "target": None, "snapshots": [], "listing_error": None, "last_run": None,
        "last_complete": None, "recovery_point_age_seconds": None}  # fmt: skip
    fill_storage(settings, runs=1)
    settings.backup_target = str(tmp_path / "backup")
    report = backup.run_backup(factory, settings, actor="t")
    body = client.get("/api/v1/backups").json()
    assert body["snapshots"] == [{"name": report.snapshot, "state": "complete"}]
    assert body["last_run"]["state"] == "complete" and body["last_run"]["actor"] == "t"
    assert body["last_run"]["snapshot"] == body["last_complete"]["snapshot"] == report.snapshot
    assert 0 <= body["recovery_point_age_seconds"] < 60
    assert_one_format(body, {"started_at", "finished_at"})
    # A target that cannot be reached is said, not a 500 (nor a page that hangs).
    settings.backup_target = "nobody@127.0.0.1:/nonexistent"
    settings.backup_ssh_command = f"ssh -p {free_port()} -o BatchMode=yes -o ConnectTimeout=2"
    broken = client.get("/api/v1/backups")
    assert broken.status_code == 200 and broken.json()["listing_error"]
    assert broken.json()["last_run"]["snapshot"] == report.snapshot


def test_pinning_a_run_that_is_not_there_is_refused_naming_similar_runs(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    fill_storage(settings, runs=2)  # vision/g/run-0, vision/g/run-1
    sign_in(client, "alice")
    for missing in ("g/run-00", "g", "run-1"):
        response = client.post("/api/v1/projects/vision/retention/pins", json={"run": missing})
        assert response.status_code == 404, missing
        assert f"no run {missing!r}" in response.json()["error"]["message"]
    message = response.json()["error"]["message"]
    assert "g/run-1" in message  # the similar run is named
    assert client.get("/api/v1/projects/vision/retention").json()["pinned"] == []
    pinned = client.post("/api/v1/projects/vision/retention/pins", json={"run": "g/run-1"})
    assert pinned.status_code == 201
