"""One timestamp format in the API: ISO 8601 in UTC to the second with `Z`, in every response
that carries a time, and declared so in the OpenAPI spec."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Board, Project, Run
from tbhub.core.timestamps import PATTERN
from tests.api.conftest import Team
from tests.times import assert_one_format


def test_every_time_in_the_api_is_iso_8601_utc_with_z(
    team: Team, factory: sessionmaker[Session]
) -> None:
    client, runs = team.client, "/api/v1/projects/vision/runs"
    old = team.settings.storage / "vision" / "old-run"
    old.mkdir(parents=True)
    (old / "events.out.tfevents.1.host").write_bytes(b"x")
    os.utime(old / "events.out.tfevents.1.host", (time.time() - 40 * 86400,) * 2)
    with transaction(factory) as session:
        project = session.query(Project).filter_by(name="vision").one()
        session.get_one(Board, project.id).last_access_at = datetime.now(UTC)
    owner, admin, writer = team.headers("alice"), team.headers("root"), team.headers("bob-write")

    made = client.post(runs, json={"name": "resnet"}, headers=writer).json()
    assert_one_format(made, {"created_at", "updated_at"})
    done = client.patch(f"{runs}/{made['id']}", json={"status": "finished"}, headers=writer)
    assert_one_format(done.json(), {"created_at", "updated_at", "finished_at"})
    assert_one_format(client.get(runs, headers=writer).json(), {"created_at"})
    with transaction(factory) as session:
        session.get_one(Run, made["id"]).last_write = datetime.now(UTC)
    state = client.get(f"/api/v1/projects/vision/state?run={made['id']}", headers=writer)
    assert_one_format(state.json(), {"last_write", "last_access_at"})
    (Path(made["logdir"]) / "hparams.yaml").write_text("lr: 0.1\n")
    contents = client.get(f"{runs}/{made['id']}/contents", headers=writer)
    assert_one_format(contents.json(), {"modified"})
    assert client.delete(f"{runs}/{made['id']}", headers=writer).status_code == 200
    link = client.post("/api/v1/projects/vision/share-links", json={"expires_in_hours": 2},
                       headers=owner)  # fmt: skip
    assert link.status_code == 201, link.text
    assert_one_format(link.json(), {"created_at", "expires_at"})
    revoked = client.delete(f"/api/v1/tokens/{team.token_ids['bob-read']}", headers=admin)
    assert_one_format(revoked.json(), {"created_at", "revoked_at"})
    mine = client.get("/api/v1/tokens", headers=team.headers("bob")).json()
    assert_one_format(mine, {"created_at", "revoked_at"})
    documents = {
        "/api/v1/projects/vision/share-links": {"created_at", "expires_at"},
        "/api/v1/audit": {"at"},
        "/api/v1/projects": {"last_access_at"},
        "/api/v1/projects/vision/board": {"last_access_at"},
        "/api/v1/boards": {"last_access_at"},
        "/api/v1/projects/vision/trash": {"trashed_at", "purge_after"},
    }
    for path, expected in documents.items():
        response = client.get(path, headers=admin)
        assert response.status_code == 200, (path, response.text)
        assert_one_format(response.json(), expected)
    client.put("/api/v1/projects/vision/retention", json={"max_age_days": 30}, headers=owner)
    plan = client.get("/api/v1/projects/vision/retention/plan", headers=owner)
    assert plan.status_code == 200, plan.text
    assert_one_format(plan.json(), {"last_write"})


def schemas_of_responses(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for methods in spec["paths"].values():
        for operation in methods.values():
            for response in operation.get("responses", {}).values():
                for content in response.get("content", {}).values():
                    yield content["schema"]


def date_time_fields(
    schema: dict[str, Any], spec: dict[str, Any], name: str, seen: set[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(model.field, schema) of every date-time field reachable from a response schema."""
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref not in seen:
            seen.add(ref)
            model = ref.rsplit("/", 1)[-1]
            yield from date_time_fields(spec["components"]["schemas"][model], spec, model, seen)
        return
    if schema.get("format") == "date-time":
        yield name, schema
    for field, sub in schema.get("properties", {}).items():
        yield from date_time_fields(sub, spec, f"{name}.{field}", seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from date_time_fields(schema[key], spec, name, seen)
    for key in ("anyOf", "allOf", "oneOf"):
        for sub in schema.get(key, []):
            yield from date_time_fields(sub, spec, name, seen)


def test_the_spec_declares_every_response_time_in_the_one_format(client: TestClient) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    seen: set[str] = set()
    fields = dict(
        field for schema in schemas_of_responses(spec)
        for field in date_time_fields(schema, spec, "", seen)
    )  # fmt: skip
    assert {"RunOut.created_at", "TokenOut.last_used_at", "BoardOut.last_access_at"} <= set(fields)
    undeclared = {name for name, field in fields.items() if field.get("pattern") != PATTERN}
    assert undeclared == set()
