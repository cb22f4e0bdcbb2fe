"""Incidents and alert rules over the API and the CLI: crashed, finished and stalled runs from
the run registry, who may read and change what (a table of every caller), the one error
shape for an invalid rule, and `--json` output."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from tbhub.cli.main import app as cli_app
from tbhub.core.db import transaction
from tbhub.core.models import Delivery, NotificationChannel, Project, Run, RunEvent
from tbhub.core.settings import Settings
from tbhub.health.monitor import HealthMonitor
from tbhub.serve.duties import start_monitor
from tbhub.storage.scalars import ScalarCache
from tests.api.conftest import Team
from tests.health.conftest import drain, incidents_of
from tests.support.metrics_text import sample
from tests.test_http_errors import served

runner = CliRunner()


@pytest.fixture
def watching(team: Team, settings: Settings, factory: sessionmaker[Session]) -> HealthMonitor:
    monitor = HealthMonitor(settings, factory, ScalarCache(settings.storage))
    drain(monitor)  # the status history from here on
    return monitor


def register(team: Team, name: str) -> dict[str, Any]:
    response = team.client.post("/api/v1/projects/vision/runs", json={"name": name},
                                headers=team.headers("bob"))  # fmt: skip
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def finish(team: Team, run_id: int, status: str) -> None:
    response = team.client.patch(f"/api/v1/projects/vision/runs/{run_id}",
                                 json={"status": status}, headers=team.headers("bob"))  # fmt: skip
    assert response.status_code == 200, response.text


def listed(team: Team, who: str = "carol", **params: str) -> dict[str, Any]:
    response = team.client.get("/api/v1/projects/vision/incidents", params=params,
                               headers=team.headers(who))  # fmt: skip
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_failed_run_is_crashed_a_killed_one_too_and_a_finished_one_a_resolved_notice(
    team: Team, watching: HealthMonitor
) -> None:
    crashed, killed, done = (register(team, n) for n in ("crashes", "killed", "done"))
    finish(team, crashed["id"], "failed")
    finish(team, killed["id"], "killed")
    finish(team, done["id"], "finished")
    assert drain(watching) == 3
    body = listed(team, **{"open": "true"})
    assert body["open"] == 2
    by_run = {i["run_path"]: i for i in body["incidents"]}
    assert by_run[crashed["path"]]["detector"] == "crashed"
    assert by_run[crashed["path"]]["severity"] == "error"
    assert by_run[killed["path"]]["severity"] == "warning"
    assert "failed" in by_run[crashed["path"]]["message"]
    [notice] = listed(team, detector="finished")["incidents"]
    assert (notice["run_path"], notice["open"], notice["severity"]) == (done["path"], False,
                                                                        "info")  # fmt: skip
    assert notice["board_url"].startswith("/boards/vision/?runFilter=")
    assert parse_qs(urlsplit(notice["board_url"]).query)["runFilter"] == [f"^{done['path']}(/|$)"]
    assert drain(watching) == 0  # seen once, raised once


def test_a_quiet_running_run_is_stalled_until_it_writes_again(
    team: Team, watching: HealthMonitor, factory: sessionmaker[Session]
) -> None:
    run = register(team, "sleepy")
    long_ago = datetime.now(UTC) - timedelta(minutes=31)  # run_stalled_minutes is 30
    with transaction(factory) as session:
        session.execute(update(Run).where(Run.id == run["id"]).values(created_at=long_ago))
    assert drain(watching) == 1
    [stall] = listed(team, detector="stalled")["incidents"]
    assert (
        stall["open"]
        and stall["tag"] is None
        and "wrote nothing for 31 minutes" in stall["message"]
    )
    assert drain(watching) == 0 and listed(team, detector="stalled")["incidents"][0]["count"] == 1
    with transaction(factory) as session:  # the watcher saw a write
        session.execute(update(Run).where(Run.id == run["id"])
                        .values(last_write=datetime.now(UTC)))  # fmt: skip
    drain(watching)
    [resolved] = listed(team, detector="stalled")["incidents"]
    assert (resolved["open"], resolved["resolved_by"]) == (False, "monitor")


def test_an_owners_rule_turns_a_detector_off(team: Team, watching: HealthMonitor) -> None:
    response = team.client.put("/api/v1/projects/vision/alert-rules",
                               json={"rules": [{"detector": "finished", "enabled": False}]},
                               headers=team.headers("alice"))  # fmt: skip
    assert response.status_code == 200, response.text
    [finished] = [r for r in response.json()["rules"] if r["detector"] == "finished"]
    assert (finished["enabled"], finished["customized"], finished["default"]["enabled"]) == (
        False, True, True)  # fmt: skip
    finish(team, register(team, "quiet")["id"], "finished")
    assert drain(watching) == 0


CALLERS = [None, "eve", "carol", "bob", "alice", "root", "bob-read", "bob-write", "alice-write"]
MATRIX: dict[str, list[int]] = {
    # action           anon eve carol bob alice root  b-r  b-w  a-w
    "list incidents": [401, 404, 200, 200, 200, 200, 200, 200, 200],
    "resolve":        [401, 404, 403, 200, 200, 200, 403, 200, 200],
    "read rules":     [401, 404, 200, 200, 200, 200, 200, 200, 200],
    "change rules":   [401, 404, 403, 403, 200, 200, 403, 403, 403],
}  # fmt: skip


def _act(team: Team, action: str, headers: dict[str, str], incident_id: int) -> httpx.Response:
    base = "/api/v1/projects/vision"
    if action == "list incidents":
        return team.client.get(f"{base}/incidents", headers=headers)
    if action == "resolve":
        return team.client.post(f"{base}/incidents/{incident_id}/resolve", headers=headers)
    if action == "read rules":
        return team.client.get(f"{base}/alert-rules", headers=headers)
    body = {"rules": [{"detector": "divergence", "threshold": 8}]}
    return team.client.put(f"{base}/alert-rules", json=body, headers=headers)


def test_who_may_read_and_change_incidents_and_rules(team: Team, watching: HealthMonitor) -> None:
    finish(team, register(team, "broken")["id"], "failed")
    drain(watching)
    [incident] = listed(team)["incidents"]
    for action, statuses in MATRIX.items():
        for caller, expected in zip(CALLERS, statuses, strict=True):
            response = _act(team, action, team.headers(caller), incident["id"])
            assert response.status_code == expected, (action, caller, response.text)
            if expected >= 400:
                assert set(response.json()["error"]) == {"code", "message"}


INVALID_RULES = [
    ({"detector": "divergence", "tag_regex": "loss("},
     "divergence: tag_regex 'loss(' is not a regular expression"),
    ({"detector": "divergence", "threshold": -1},
     "divergence: threshold (robust z-scores) must be above 0"),
    ({"detector": "grad_explosion", "window": 2}, "grad_explosion: window must be between 5"),
    ({"detector": "stalled", "tag_regex": "x"},
     "stalled is about whole runs and takes no tag regex"),
    ({"detector": "crashed", "threshold": 3}, "crashed takes no threshold"),
    ({"detector": "divergence", "histograms": True},
     "only the nan detector looks into histograms"),
    ({"detector": "stalled", "threshold": 1e9},
     "threshold (minutes) must be above 0 and at most 14400"),
]  # fmt: skip


def test_an_invalid_rule_is_refused_naming_it_and_nothing_is_saved(team: Team) -> None:
    for rule, says in INVALID_RULES:
        body = {"rules": [{"detector": "plateau", "enabled": True}, rule]}
        response = team.client.put("/api/v1/projects/vision/alert-rules", json=body,
                                   headers=team.headers("alice"))  # fmt: skip
        assert response.status_code == 422, rule
        assert response.json()["error"]["code"] == "invalid_input"
        assert says in response.json()["error"]["message"]
        rules = team.client.get("/api/v1/projects/vision/alert-rules",
                                headers=team.headers("alice"))  # fmt: skip
        assert not any(r["customized"] for r in rules.json()["rules"])  # plateau unsaved too


def test_admin_alerts_set_and_show_with_json(
    team: Team, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("TBHUB_DATA_DIR", str(settings.data_dir)),
                        ("TBHUB_STORAGE_ROOT", str(settings.storage)),
                        ("TBHUB_DATABASE_URL", settings.db_url),
                        ("TBHUB_CONFIG", str(tmp_path / "absent.toml"))):  # fmt: skip
        monkeypatch.setenv(name, value)
    done = runner.invoke(cli_app, ["admin", "alerts", "set", "vision", "--detector", "plateau",
                                   "--on", "--window", "500", "--json"])  # fmt: skip
    assert done.exit_code == 0, done.stderr
    [plateau] = [r for r in json.loads(done.stdout)["rules"] if r["detector"] == "plateau"]
    assert (plateau["enabled"], plateau["window"], plateau["customized"]) == (True, 500, True)
    refused = runner.invoke(cli_app, ["admin", "alerts", "set", "vision", "--detector",
                                      "divergence", "--tag-regex", "(", "--json"])  # fmt: skip
    assert refused.exit_code == 1
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "invalid_input" and "tag_regex '(' is not a regular" in error["message"]
    shown = runner.invoke(cli_app, ["admin", "alerts", "show", "vision"])
    assert shown.exit_code == 0 and "plateau" in shown.stdout
    reset = runner.invoke(cli_app, ["admin", "alerts", "set", "vision", "-d", "plateau",
                                    "--reset", "--json"])  # fmt: skip
    assert not any(r["customized"] for r in json.loads(reset.stdout)["rules"])


def test_alerts_list_over_the_api_with_json(
    team: Team, watching: HealthMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish(team, register(team, "broken")["id"], "failed")
    drain(watching)
    with served(team.client.app) as port:  # type: ignore[arg-type]
        monkeypatch.setenv("TBHUB_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("TBHUB_TOKEN", team.secrets["bob-read"])
        as_json = runner.invoke(cli_app, ["alerts", "list", "-p", "vision", "--json"])
        table = runner.invoke(cli_app, ["alerts", "list", "-p", "vision"])
        monkeypatch.setenv("TBHUB_TOKEN", team.secrets["dave-write-speech"])
        denied = runner.invoke(cli_app, ["alerts", "list", "-p", "vision", "--json"])
    assert as_json.exit_code == 0, as_json.stderr
    [incident] = json.loads(as_json.stdout)["incidents"]
    assert incident["detector"] == "crashed" and incident["open"]
    assert table.exit_code == 0 and "crashed" in table.stdout and "1 open in vision" in table.stdout
    assert denied.exit_code == 1 and json.loads(denied.stdout)["error"]["code"] == "not_found"


def test_incidents_show_on_metrics(team: Team, watching: HealthMonitor,
                                   factory: sessionmaker[Session]) -> None:  # fmt: skip
    finish(team, register(team, "broken")["id"], "failed")
    drain(watching)
    assert [i.detector for i in incidents_of(factory)] == ["crashed"]
    text = team.client.get("/metrics").text
    assert sample(text, "tbhub_incidents_open", project="vision", detector="crashed") == 1
    assert sample(text, "tbhub_incidents", detector="crashed") == 1
    assert sample(text, "tbhub_notify_deliveries", state="pending") == 0


def test_a_status_change_that_becomes_visible_late_still_counts(
    team: Team, watching: HealthMonitor, factory: sessionmaker[Session]
) -> None:
    """On PostgreSQL a transaction with a lower id can commit after one with a higher id."""
    early, later = register(team, "early"), register(team, "later")
    with factory() as session:
        top = session.scalar(select(func.max(RunEvent.id)))
    assert top is not None
    gap = top + 10  # an id handed to a transaction that has not committed yet
    with transaction(factory) as session:
        session.add(RunEvent(id=gap + 1, run_id=later["id"], kind="status", value="finished",
                             actor="test", at=datetime.now(UTC)))  # fmt: skip
    assert drain(watching) == 1
    with transaction(factory) as session:
        session.add(RunEvent(id=gap, run_id=early["id"], kind="status", value="failed",
                             actor="test", at=datetime.now(UTC)))  # fmt: skip
    assert drain(watching) == 1
    [crashed] = listed(team, detector="crashed")["incidents"]
    assert crashed["run_path"] == early["path"]
    assert drain(watching) == 0


def test_the_leaders_monitor_shows_on_metrics_and_can_be_turned_off(
    team: Team, settings: Settings
) -> None:
    context = team.client.app.state.context  # type: ignore[attr-defined]
    monitor = start_monitor(settings, context)
    assert monitor is not None
    try:
        deadline = time.monotonic() + 10
        while monitor.stats.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        text = team.client.get("/metrics").text
        assert (sample(text, "tbhub_health_passes_total") or 0) >= 1
        assert sample(text, "tbhub_health_runs_behind") == 0
    finally:
        monitor.stop()
    off = settings.model_copy(update={"health_monitor": False})
    assert start_monitor(off, context) is None


def test_a_new_incident_is_queued_for_the_projects_channels_and_a_repeat_is_not(
    team: Team, watching: HealthMonitor, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        vision = session.scalar(select(Project.id).where(Project.name == "vision"))
        hook = "https://hooks.example/ops"
        session.add(NotificationChannel(project_id=vision, name="ops", kind="webhook", url=hook,
                                        created_by="alice"))  # fmt: skip
    run = register(team, "broken")
    finish(team, run["id"], "failed")
    drain(watching)
    finish(team, run["id"], "running")  # resumed: the crash is resolved ...
    finish(team, run["id"], "failed")  # ... and a new one raised
    drain(watching)
    with factory() as session:
        queued = [(d.incident_id, d.payload["detector"]) for d in session.scalars(select(Delivery))]
    crashes = [i.id for i in incidents_of(factory) if i.detector == "crashed"]
    assert len(crashes) == 2 and queued == [(i, "crashed") for i in crashes]
