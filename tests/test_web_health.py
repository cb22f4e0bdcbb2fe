"""The run-health pages in-process, on both databases: the project page's badges, a run's
incident timeline, the alerts (rules) page, the notifications (channels) page and the email
settings, with every form checked against every role: admin, owner, editor, viewer and
someone not on the project."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import AlertRule, Incident, NotificationChannel, Project
from tbhub.core.settings import Settings
from tests.forms import form_token
from tests.test_api import seed, sign_in
from tests.test_web_runs import add_run

HTML = {"Accept": "text/html"}
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def add_incident(
    factory: sessionmaker[Session], run_id: int, detector: str, **fields: object
) -> int:
    severity = {"nan": "error", "divergence": "error", "stalled": "warning",
                "finished": "info"}[detector]  # fmt: skip
    with transaction(factory) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        assert project_id is not None
        given = {"run_path": "alpha", "tag": "train/loss", "step": 120, "last_step": 120,
                 "message": f"{detector} seen", **fields}  # fmt: skip
        incident = Incident(project_id=project_id, run_id=run_id, detector=detector,
                            severity=severity, first_seen=T0, last_seen=T0, count=1,
                            **given)  # fmt: skip
        session.add(incident)
        session.flush()
        return incident.id


@pytest.fixture
def runs(factory: sessionmaker[Session], settings: Settings) -> dict[str, int]:
    seed(factory, settings)
    ids = {name: add_run(factory, "vision", name) for name in ("alpha", "beta", "gamma")}
    add_incident(factory, ids["alpha"], "nan", value_text="nan",
                 message="train/loss is NaN at step 120")  # fmt: skip
    add_incident(factory, ids["alpha"], "stalled", tag=None, step=None, last_step=None,
                 message="no new step for 30 minutes")  # fmt: skip
    add_incident(factory, ids["beta"], "divergence", run_path="beta", resolved_at=T0,
                 resolved_by="monitor",
                 message="train/loss rose to 40x its recent level")  # fmt: skip
    return ids


def badge_of(page: str, run_id: int) -> str:
    found = re.search(rf'class="badge (health-\w+)" data-health="{run_id}"[^>]*>([^<]*)', page)
    assert found is not None, f"no health badge for run {run_id}"
    return f"{found.group(1)} {found.group(2)}"


def test_each_run_on_the_project_page_has_its_health_badge(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")  # an editor; any member sees the badges
    page = client.get("/projects/vision").text
    assert badge_of(page, runs["alpha"]) == "health-error NaN +1"  # worst first, then how many
    assert badge_of(page, runs["beta"]) == "health-ok healthy"  # its incident is resolved
    assert badge_of(page, runs["gamma"]) == "health-ok healthy"
    assert f'href="/projects/vision/runs/{runs["alpha"]}#incidents"' in page


def test_a_runs_page_shows_its_incidents_with_links_to_the_board(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    page = client.get(f"/projects/vision/runs/{runs['alpha']}").text
    timeline = page.split('<ol class="timeline"')[1].split("</ol>")[0]
    assert timeline.index("train/loss is NaN at step 120") < timeline.index("no new step")
    links = re.findall(r'<a href="(/boards/vision/\?[^"]+)"', timeline)
    assert len(links) == 2
    assert "runFilter=%5Ealpha" in links[0] and "tagFilter=" in links[0]
    assert "tagFilter" not in links[1]  # a stall is about the whole run
    assert page.count(">Resolve<") == 2  # an editor may resolve


def test_an_editor_resolves_an_incident_and_its_badge_goes(
    client: TestClient, factory: sessionmaker[Session], runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    with factory() as session:
        ids = session.scalars(select(Incident.id).where(Incident.run_id == runs["alpha"]))
        incident_ids = list(ids)
    token = form_token(client, "/projects/vision")
    for incident_id in incident_ids:
        response = client.post(
            f"/projects/vision/runs/{runs['alpha']}/incidents/{incident_id}/resolve",
            data={"csrf_token": token}, headers=HTML, follow_redirects=False,
        )  # fmt: skip
        assert response.status_code == 303, response.text
    assert badge_of(client.get("/projects/vision").text, runs["alpha"]) == "health-ok healthy"
    with factory() as session:
        assert set(session.scalars(select(Incident.resolved_by).where(
            Incident.run_id == runs["alpha"]))) == {"bob"}  # fmt: skip


def test_an_owner_changes_a_rule_and_an_invalid_one_is_refused_whole(
    client: TestClient, factory: sessionmaker[Session], runs: dict[str, int]
) -> None:
    sign_in(client, "alice")
    page = client.get("/projects/vision/alerts").text
    assert 'aria-label="The diverging rule"' in page
    token = form_token(client, "/projects/vision/alerts")
    saved = client.post("/projects/vision/alerts/divergence",
                        data={"csrf_token": token, "threshold": "8", "window": "50"},
                        follow_redirects=False)  # fmt: skip
    assert saved.status_code == 303
    assert saved.headers["location"] == "/projects/vision/alerts?notice=rule_saved#rule-divergence"
    refused = client.post("/projects/vision/alerts/divergence",
                          data={"csrf_token": token, "tag_regex": "(", "threshold": "3"},
                          headers=HTML)  # fmt: skip
    assert refused.status_code == 422
    assert "divergence: tag_regex &#39;(&#39; is not a regular expression" in refused.text
    with factory() as session:
        row = session.scalar(select(AlertRule).where(AlertRule.detector == "divergence"))
        assert row is not None and (row.threshold, row.window, row.tag_regex) == (8.0, 50, None)
    reset = client.post("/projects/vision/alerts/divergence",
                        data={"csrf_token": token, "reset": "yes"},
                        follow_redirects=False)  # fmt: skip
    assert reset.status_code == 303
    with factory() as session:
        assert session.scalar(select(AlertRule.id)) is None


# (who, the project role they have) -> what each may do: see the pages, change rules and
# channels (owners and admins), resolve incidents (editors and up).
ROLES = {
    "root": "admin",
    "alice": "owner",
    "bob": "editor",
    "viewer": "viewer",
    "eve": "none",
}
SEE = {"admin", "owner", "editor", "viewer"}
MANAGE = {"admin", "owner"}
RESOLVE = {"admin", "owner", "editor"}


def expected_status(role: str, allowed: set[str], success: int) -> int:
    if role == "none":
        return 404  # the project is hidden from someone not on it
    return success if role in allowed else 403


@pytest.mark.parametrize("user", list(ROLES))
def test_every_health_form_answers_each_role_as_the_api_does(
    client: TestClient,
    factory: sessionmaker[Session],
    settings: Settings,
    runs: dict[str, int],
    user: str,
) -> None:
    from tbhub.core.models import Role
    from tbhub.domain.projects import set_membership
    from tbhub.domain.users import create_user

    with transaction(factory) as session:
        create_user(session, name="viewer", password="correct horse battery staple",
                    is_admin=False, actor="test")  # fmt: skip
        set_membership(session, project="vision", user="viewer", role=Role.viewer, actor="test")
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        channel = NotificationChannel(project_id=project_id, name="hook", kind="webhook",
                                      url="https://93.184.215.14/x", secret="s" * 32,
                                      recipients=[], detectors=[], enabled=True,
                                      created_by="alice")  # fmt: skip
        session.add(channel)
        session.flush()
        channel_id = channel.id
        incident_id = session.scalar(select(Incident.id).where(Incident.detector == "nan"))
    role = ROLES[user]
    password = "correct horse battery staple" if user == "viewer" else None
    assert sign_in(client, user, *([password] if password else [])) == 303
    token = form_token(client, "/settings/email")
    for path in ("/projects/vision/alerts", "/projects/vision/channels"):
        response = client.get(path, headers=HTML)
        assert response.status_code == expected_status(role, SEE, 200), (user, path)
    forms = {
        "/projects/vision/alerts/divergence": ({"threshold": "7"}, MANAGE),
        f"/projects/vision/channels/{channel_id}/disable": ({}, MANAGE),
        "/projects/vision/channels": ({"kind": "slack", "url": "https://93.184.215.14/y"},
                                      MANAGE),
        f"/projects/vision/runs/{runs['alpha']}/incidents/{incident_id}/resolve": ({}, RESOLVE),
        f"/projects/vision/channels/{channel_id}/delete": ({}, MANAGE),
    }  # fmt: skip
    for path, (data, allowed) in forms.items():
        response = client.post(path, data={**data, "csrf_token": token}, headers=HTML,
                               follow_redirects=False)  # fmt: skip
        assert response.status_code == expected_status(role, allowed, 303), (user, path)
    with factory() as session:
        changed = session.scalar(select(AlertRule.threshold)) is not None
        channels_left = list(session.scalars(select(NotificationChannel.name)))
        resolved = session.get(Incident, incident_id)
        assert resolved is not None
    assert changed == (role in MANAGE)
    if role in MANAGE:
        assert channels_left == ["slack"]  # the new one; "hook" was deleted
    else:
        assert channels_left == ["hook"]
    assert (resolved.resolved_at is not None) == (role in RESOLVE)


def test_the_email_page_keeps_a_users_own_preference(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, runs: dict[str, int]
) -> None:
    assert settings.notify_smtp_host is None  # this instance sends no email: nothing to set
    sign_in(client, "bob")
    page = client.get("/settings/email").text
    assert "This instance sends no email" in page
    token = form_token(client, "/settings/email")
    response = client.post("/settings/email/vision", data={"csrf_token": token}, headers=HTML)
    assert response.status_code == 422
    assert "TBHUB_NOTIFY_SMTP_HOST" in response.text
    hidden = client.post("/settings/email/secret-project", data={"csrf_token": token},
                         headers=HTML)  # fmt: skip
    assert hidden.status_code == 404


def test_everything_shown_is_escaped(client: TestClient, factory: sessionmaker[Session],
                                     runs: dict[str, int]) -> None:  # fmt: skip
    add_incident(factory, runs["gamma"], "nan", run_path="gamma", tag="<b>x</b>",
                 message="<script>alert(1)</script>")  # fmt: skip
    sign_in(client, "bob")
    for path in (f"/projects/vision/runs/{runs['gamma']}", "/projects/vision/alerts"):
        page = client.get(path).text
        assert "<script>alert(1)" not in page and "<b>x</b>" not in page, path
