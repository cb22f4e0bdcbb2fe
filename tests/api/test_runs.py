"""The run registry over /api/v1: register, list, read, update, trash; on both databases."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import AuditEvent, Project, Run, RunEvent, RunParam, RunStatus
from tbhub.domain.runs import RunFields, register_run
from tbhub.housekeeping.trash import restore
from tests.api.conftest import Team, one_connection_client

RUNS = "/api/v1/projects/vision/runs"


def register(team: Team, who: str = "bob-write", **body: object) -> dict[str, object]:
    response = team.client.post(RUNS, json={"name": "resnet", **body}, headers=team.headers(who))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_registering_a_run_creates_its_directory_and_returns_where_to_write(team: Team) -> None:
    run = register(team, group="ablations/lr", hparams={"lr": 0.1, "layers": 50, "amp": True},
                   tags=["baseline"], git_commit="abc123", command="python train.py")  # fmt: skip
    assert re.fullmatch(r"ablations/lr/\d{8}-\d{6}-resnet", str(run["path"]))
    logdir = Path(str(run["logdir"]))
    assert logdir == team.settings.storage / "vision" / str(run["path"]) and logdir.is_dir()
    assert run["upload_url"] == f"/api/v1/projects/vision/runs/{run['id']}/files/"
    assert run["status"] == "running" and run["source"] == "api"
    assert run["hparams"] == {"lr": 0.1, "layers": 50, "amp": True}
    assert run["created_by"] == "bob" and run["tags"] == ["baseline"]


def test_a_registration_writes_its_row_tags_params_first_status_and_audit_row(
    team: Team, factory: sessionmaker[Session]
) -> None:
    """The write path's few INSERTs (domain/runs._insert_run) leave what the ORM's unit of
    work left: the row as answered, its tags, its parameter rows, its first status event
    and the audit row naming it; and the run reads back the same afterwards."""
    run = register(team, hparams={"lr": 0.1, "opt": "adam"}, tags=["b", "a", "b"],
                   status="finished", notes="n")  # fmt: skip
    run_id = int(str(run["id"]))
    with factory() as session:
        row = session.get(Run, run_id)
        assert row is not None and row.path == run["path"] and row.tags == ["a", "b"]
        assert row.status == RunStatus.finished and row.finished_at is not None
        assert row.metrics == {} and row.bytes == 0 and row.retention_state.value == "present"
        params = {
            (p.kind, p.key, p.num, p.text, p.source)
            for p in session.scalars(select(RunParam).where(RunParam.run_id == run_id))
        }
        events = [
            (e.kind, e.value, e.actor)
            for e in session.scalars(select(RunEvent).where(RunEvent.run_id == run_id))
        ]
        audits = [(a.actor, a.detail) for a in session.scalars(
            select(AuditEvent).where(AuditEvent.action == "run.create",
                                     AuditEvent.target == f"vision/{run['path']}"))]  # fmt: skip
    assert params == {("h", "lr", 0.1, None, "r"), ("h", "opt", None, "adam", "r")}
    assert events == [("status", "finished", "bob")]
    assert audits == [("bob", {"id": run_id})]
    again = team.client.get(f"{RUNS}/{run_id}", headers=team.headers("bob-write")).json()
    assert {k: again[k] for k in run} == run
    found = team.client.get("/api/v1/runs?hparam.opt=adam", headers=team.headers("bob-write"))
    assert [r["id"] for r in found.json()["runs"]] == [run_id]


def statements_of(team: Team, body: dict[str, object]) -> list[str]:
    """The SQL statements one registration by a token sends, its token's grant cached."""
    engine = team.client.app.state.context.engine  # type: ignore[attr-defined]
    sent: list[str] = []

    def note(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        sent.append(" ".join(statement.split()[:3]))

    event.listen(engine, "before_cursor_execute", note)
    try:
        register(team, **body)
    finally:
        event.remove(engine, "before_cursor_execute", note)
    return sent


def test_a_registration_sends_one_read_and_an_insert_per_table(team: Team) -> None:
    """The guard on the write path's cost: the token owner's enabled flag (one column of
    one row), then one INSERT per table (tags and parameters only when there are any), and
    nothing read back."""
    register(team, name="warm")  # the token's grant and the project's access cached
    plain = statements_of(team, {"name": "plain"})
    assert plain == ["SELECT users.disabled FROM", "INSERT INTO runs",
                     "INSERT INTO run_events", "INSERT INTO audit_events"]  # fmt: skip
    full = statements_of(team, {"name": "full", "tags": ["a", "b"], "hparams": {"lr": 0.1}})
    assert full == [*plain[:2], "INSERT INTO run_tags", "INSERT INTO run_params", *plain[2:]]


def test_the_same_name_in_the_same_second_gets_a_suffix(team: Team) -> None:
    paths = {str(register(team)["path"]) for _ in range(3)}
    assert len(paths) == 3
    stems = {re.sub(r"-(2|3)$", "", p) for p in paths}
    assert len(stems) <= 2  # at most one second boundary crossed


def test_registrations_in_one_second_take_the_next_free_suffix(
    team: Team, factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
    assert project_id is not None
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

    def register_at() -> str:
        run = register_run(factory, storage_root=team.settings.storage, project="vision",
                           project_id=project_id, name="r", group="g",
                           fields=RunFields(hparams={}, tags=[]), actor="test", now=at)  # fmt: skip
        return run.path

    stem = "g/20300102-030405-r"
    (team.settings.storage / "vision" / f"{stem}-3").mkdir(parents=True)  # not in the registry
    assert [register_at() for _ in range(4)] == [stem, f"{stem}-2", f"{stem}-4", f"{stem}-5"]


def test_a_registration_by_token_needs_one_database_connection_at_a_time(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a connection per request, a server's pool serves as many registrations at once
    as it holds; a request that needed a second one while keeping its first would wait for
    the pool forever once every connection is taken (64 clients, a pool of 15)."""
    with one_connection_client(team, monkeypatch) as client:
        response = client.post(RUNS, json={"name": "one-connection"},
                               headers=team.headers("bob-write"))  # fmt: skip
    assert response.status_code == 201, response.text


def test_a_registration_by_session_cookie_needs_one_database_connection_at_a_time(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The browser's way in reads its session and user apart from the request's session, so
    a registration in its own transaction needs no second connection while holding one."""
    with one_connection_client(team, monkeypatch) as client:
        headers = Team(client=client, settings=team.settings, user_ids=team.user_ids).headers
        response = client.post(RUNS, json={"name": "one-connection"}, headers=headers("bob"))
    assert response.status_code == 201, response.text


def test_64_concurrent_session_registrations_are_all_answered_well_within_the_pool_timeout(
    team: Team,
) -> None:
    """64 browsers at once, more than the server's 40 request threads, on the engine the
    server makes: no request waits on the pool (30 s) for another that waits on it too."""
    headers = [team.headers("bob") for _ in range(64)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=64) as clients:
        statuses = list(clients.map(lambda h: team.client.post(
            RUNS, json={"name": "crowd"}, headers=h).status_code, headers))  # fmt: skip
    elapsed = time.monotonic() - start
    assert statuses == [201] * 64
    assert elapsed < 15, f"64 registrations took {elapsed:.1f} s"


def test_a_directory_already_on_disk_is_never_reused(team: Team) -> None:
    first = register(team)
    (team.settings.storage / "vision" / (str(first["path"]) + "-2")).mkdir()
    (team.settings.storage / "vision" / (str(first["path"]) + "-3")).mkdir()
    second = register(team)
    if str(second["path"]).startswith(str(first["path"])):
        assert second["path"] == str(first["path"]) + "-4"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "../escape"}, "run name"),
        ({"name": "/abs"}, "run name"),
        ({"name": "a\x00b"}, "name"),
        ({"name": "ok", "group": "../up"}, "group"),
        ({"name": "ok", "group": "/abs"}, "group"),
        ({"name": "ok", "group": "a/b/c/d/e"}, "group"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ok", "hparams": {"lr": float("nan")}}, "hparams"),
        ({"name": "ok", "git_dirty": 1}, "git_dirty"),
        ({"name": "ok", "tags": ["bad tag"]}, "tag"),
        ({"name": "ok", "status": "discovered"}, "status"),
    ],
)
def test_bad_registrations_get_422_and_write_nothing(
    team: Team, factory: sessionmaker[Session], body: dict[str, object], field: str
) -> None:
    response = team.client.post(RUNS, content=_json(body), headers={
        **team.headers("bob-write"), "Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_input"
    assert field in response.json()["error"]["message"]
    with factory() as session:
        assert session.query(Run).count() == 0
    assert sorted(p.name for p in (team.settings.storage / "vision").iterdir()) == []


def _json(body: dict[str, object]) -> str:
    import json

    return json.dumps(body)  # allow_nan: the server, not the client, must refuse NaN


def test_unknown_project_is_404_with_a_hint(team: Team) -> None:
    response = team.client.post("/api/v1/projects/nope/runs", json={"name": "x"},
                                headers=team.headers("bob"))  # fmt: skip
    assert response.status_code == 404
    assert "GET /api/v1/projects" in response.json()["error"]["message"]


def test_list_filters_and_pages(team: Team) -> None:
    a = register(team, name="alpha", tags=["x"], group="g1")
    b = register(team, name="beta", tags=["y"], notes="the good one")
    c = register(team, name="gamma", tags=["x"])
    h = team.headers("bob-read")

    def ids(**params: object) -> list[object]:
        response = team.client.get(RUNS, params=params, headers=h)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["runs"]]

    assert ids() == [c["id"], b["id"], a["id"]]
    assert ids(tag="x") == [c["id"], a["id"]]
    assert ids(group="g1") == [a["id"]]
    assert ids(q="GOOD") == [b["id"]]
    assert ids(status="finished") == []
    page = team.client.get(RUNS, params={"limit": 2}, headers=h).json()
    assert [r["id"] for r in page["runs"]] == [c["id"], b["id"]]
    rest = team.client.get(RUNS, params={"limit": 2, "cursor": page["next_cursor"]}, headers=h)
    assert [r["id"] for r in rest.json()["runs"]] == [a["id"]]
    assert rest.json()["next_cursor"] is None
    assert team.client.get(RUNS, params={"limit": 0}, headers=h).status_code == 422


def test_patch_sets_status_merges_metrics_and_refuses_nonsense(team: Team) -> None:
    run = register(team)
    url = f"{RUNS}/{run['id']}"
    h = team.headers("bob-write")
    done = team.client.patch(url, json={"status": "finished", "metrics": {"acc": 0.9}}, headers=h)
    assert done.status_code == 200 and done.json()["finished_at"] is not None
    more = team.client.patch(url, json={"metrics": {"loss": 0.1}}, headers=h).json()
    assert more["metrics"] == {"acc": 0.9, "loss": 0.1} and more["status"] == "finished"
    for bad in ({"metrics": {"acc": True}}, {"metrics": {"acc": "0.9"}}, {"status": "paused"}):
        response = team.client.patch(url, json=bad, headers=h)
        assert response.status_code == 422, bad
    assert team.client.get(url, headers=h).json()["metrics"] == {"acc": 0.9, "loss": 0.1}


def test_delete_moves_the_run_to_the_trash_and_restore_brings_it_back(
    team: Team, factory: sessionmaker[Session]
) -> None:
    run = register(team)
    logdir = Path(str(run["logdir"]))
    (logdir / "events.out.tfevents.1.host").write_bytes(b"x" * 10)
    url = f"{RUNS}/{run['id']}"
    gone = team.client.delete(url, headers=team.headers("bob-write"))
    assert gone.status_code == 200, gone.text
    assert gone.json()["retention_state"] == "trashed" and not logdir.exists()
    assert team.client.delete(url, headers=team.headers("bob-write")).status_code == 409
    listed = team.client.get(RUNS, headers=team.headers("bob")).json()["runs"]
    assert run["id"] not in [r["id"] for r in listed]
    restore(factory, team.settings, str(gone.json()["trash_id"]), actor="test")
    back = team.client.get(url, headers=team.headers("bob")).json()
    assert back["retention_state"] == "present" and back["trash_id"] is None
    assert (logdir / "events.out.tfevents.1.host").read_bytes() == b"x" * 10


def test_a_run_from_another_project_is_not_found(team: Team) -> None:
    run = register(team)
    response = team.client.get(f"/api/v1/projects/speech/runs/{run['id']}",
                               headers=team.headers("root"))  # fmt: skip
    assert response.status_code == 404
