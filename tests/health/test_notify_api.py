"""The channel API: who may do what (a table, one row per action, one status per caller),
secrets that never come back out, and each input checked with a clear error."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import select

from tbhub.core.db import transaction
from tbhub.core.models import AuditEvent
from tbhub.health.notify.outbox import DeliveryWorker, enqueue
from tests.api.conftest import Team
from tests.api.test_roles import CALLERS
from tests.health.notify_receivers import (
    SmtpServer,
    WebhookReceiver,
    make_certificate,
    signature_ok,
)

# One row per action, one status per caller (tests/api/test_roles.py's CALLERS): members
# read channels, owners change them (a token never has owner powers); anyone signed in
# keeps their own email preferences for the projects they can read.
MATRIX: dict[str, list[int]] = {
    # action              anon eve carol bob alice root  b-r  b-w  a-w  r-w  d-w-speech
    "list channels":     [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "read channel":      [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "create channel":    [401, 404, 403, 403, 201, 201, 403, 403, 403, 403, 404],
    "update channel":    [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 404],
    "delete channel":    [401, 404, 403, 403, 204, 204, 403, 403, 403, 403, 404],
    "send a test":       [401, 404, 403, 403, 200, 200, 403, 403, 403, 403, 404],
    "set my email":      [401, 404, 200, 200, 200, 200, 200, 200, 200, 200, 404],
    "stop my email":     [401, 404, 204, 204, 204, 204, 204, 204, 204, 204, 404],
    "list my email":     [401, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200],
}  # fmt: skip

BASE = "/api/v1/projects/vision"
SECRET = "the-webhook-secret-nobody-sees-again"
_names = count()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.fixture
def crew(team: Team, receiver: WebhookReceiver) -> Team:
    """The roles team, on an instance that allows the loopback receiver and has SMTP set."""
    context = team.client.app.state.context  # type: ignore[attr-defined]
    context.settings = context.settings.model_copy(update={
        "notify_allow_networks": ["127.0.0.1/32"], "notify_smtp_host": "127.0.0.1",
    })  # fmt: skip
    return team


def _channel(crew: Team, receiver: WebhookReceiver) -> int:
    """A new webhook channel on vision, made by an admin."""
    response = crew.client.post(f"{BASE}/channels", headers=crew.headers("root"), json={
        "kind": "webhook", "name": f"hook-{next(_names)}", "url": receiver.url("/t/abc"),
        "secret": SECRET,
    })  # fmt: skip
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


Action = Callable[[Team, WebhookReceiver, dict[str, str]], httpx.Response]
ACTIONS: dict[str, Action] = {
    "list channels": lambda t, r, h: t.client.get(f"{BASE}/channels", headers=h),
    "read channel": lambda t, r, h: t.client.get(f"{BASE}/channels/{_channel(t, r)}", headers=h),
    "create channel": lambda t, r, h: t.client.post(f"{BASE}/channels", headers=h, json={
        "kind": "slack", "name": f"slack-{next(_names)}", "url": r.url("/services/T/B/x"),
    }),
    "update channel": lambda t, r, h: t.client.patch(
        f"{BASE}/channels/{_channel(t, r)}", headers=h, json={"detectors": ["nan"]}
    ),
    "delete channel": lambda t, r, h: t.client.delete(
        f"{BASE}/channels/{_channel(t, r)}", headers=h
    ),
    "send a test": lambda t, r, h: t.client.post(
        f"{BASE}/channels/{_channel(t, r)}/test", headers=h
    ),
    "set my email": lambda t, r, h: t.client.put(f"{BASE}/email-preference", headers=h, json={
        "address": "me@example.org", "detectors": ["nan", "crashed"],
    }),
    "stop my email": lambda t, r, h: t.client.delete(f"{BASE}/email-preference", headers=h),
    "list my email": lambda t, r, h: t.client.get("/api/v1/users/me/email-preferences",
                                                  headers=h),
}  # fmt: skip


@pytest.mark.parametrize("action", MATRIX)
def test_each_caller_gets_what_the_table_says(
    crew: Team, receiver: WebhookReceiver, action: str
) -> None:
    got = []
    for caller in CALLERS:
        response = ACTIONS[action](crew, receiver, crew.headers(caller))
        got.append(response.status_code)
        if response.is_error:
            assert set(response.json()) == {"error"}, (action, caller, response.text)
    assert dict(zip(CALLERS, got, strict=True)) == dict(zip(CALLERS, MATRIX[action], strict=True))


def test_a_test_send_arrives_signed(crew: Team, receiver: WebhookReceiver) -> None:
    channel = _channel(crew, receiver)
    response = crew.client.post(f"{BASE}/channels/{channel}/test", headers=crew.headers("alice"))
    assert response.json() == {"delivered": True, "error": None}
    (request,) = receiver.wait_for(1)
    assert signature_ok(SECRET, request)
    assert b'"type":"test"' in request.body and b"sent by alice" in request.body


def test_secrets_are_never_shown_again(crew: Team, receiver: WebhookReceiver) -> None:
    headers = crew.headers("alice")
    given = crew.client.post(f"{BASE}/channels", headers=headers, json={
        "kind": "webhook", "name": "given", "url": receiver.url("/hooks/T0K3N"), "secret": SECRET,
    })  # fmt: skip
    made = crew.client.post(f"{BASE}/channels", headers=headers, json={
        "kind": "webhook", "name": "made", "url": receiver.url("/hooks/T0K3N"),
    })  # fmt: skip
    slack = crew.client.post(f"{BASE}/channels", headers=headers, json={
        "kind": "slack", "name": "slack", "url": receiver.url("/services/T0/B0/SLACKT0K3N"),
    })  # fmt: skip
    assert "secret" not in given.json() and given.json()["has_secret"] is True
    tbhub_made = made.json()["secret"]  # shown this once
    assert len(tbhub_made) >= 32
    assert slack.json()["url"] == given.json()["url"] == f"http://127.0.0.1:{receiver.port}/…"
    shown = [crew.client.get(f"{BASE}/channels", headers=headers).text]
    shown += [crew.client.get(f"{BASE}/channels/{r.json()['id']}", headers=headers).text
              for r in (given, made, slack)]  # fmt: skip
    shown += [crew.client.patch(f"{BASE}/channels/{given.json()['id']}", headers=headers,
                                json={"secret": SECRET + "-2"}).text]  # fmt: skip
    for text in shown:
        for secret in (SECRET, tbhub_made, "T0K3N"):
            assert secret not in text


def test_secrets_are_never_logged_nor_audited(
    crew: Team, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.answer.status = 500
    url = receiver.url("/hooks/T0K3N")
    for kind, body in (("webhook", {"secret": SECRET}), ("slack", {})):
        made = crew.client.post(f"{BASE}/channels", headers=crew.headers("alice"),
                                json={"kind": kind, "name": kind, "url": url, **body})  # fmt: skip
        assert made.status_code == 201, made.text
    context = crew.client.app.state.context  # type: ignore[attr-defined]
    with transaction(context.factory) as session:
        from tbhub.core.models import Incident

        incident = Incident(project_id=crew_project(crew), run_path="r", tag="loss",
                            detector="nan", severity="error", message="loss is NaN")  # fmt: skip
        session.add(incident)
        session.flush()
        assert enqueue(session, incident) == 2
    DeliveryWorker(context.settings, context.factory).run_once()
    assert len(receiver.wait_for(2)) == 2
    assert "answered 500" in caplog.text
    with context.factory() as session:
        audit = " ".join(str(e.detail) for e in session.scalars(select(AuditEvent)))
    for text in (caplog.text, audit):
        assert SECRET not in text and "T0K3N" not in text


def crew_project(crew: Team) -> int:
    from tbhub.core.models import Project

    context = crew.client.app.state.context  # type: ignore[attr-defined]
    with context.factory() as session:
        return int(session.scalar(select(Project.id).where(Project.name == "vision")))


BAD_INPUTS = [
    ({"kind": "webhook", "name": "x"}, 422, "needs its url"),
    ({"kind": "webhook", "name": "x", "url": "https://93.184.216.34/", "secret": "short"}, 422,
     "at least 16"),
    ({"kind": "email", "name": "x"}, 422, "at least one address"),
    ({"kind": "email", "name": "x", "recipients": ["not an address"]}, 422, "not an email"),
    ({"kind": "slack", "name": "x", "url": "https://93.184.216.34/", "detectors": ["nope"]},
     422, "unknown incident kind 'nope'"),
    ({"kind": "slack", "name": "x", "url": "https://93.184.216.34/", "recipients": ["a@b.org"]},
     422, "only an email channel"),
    ({"kind": "pager", "name": "x"}, 422, ""),
    ({"kind": "slack", "name": "x", "url": "https://93.184.216.34/", "extra": 1}, 422, ""),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "says"), BAD_INPUTS)
def test_a_bad_channel_is_refused_with_a_clear_error(
    crew: Team, body: dict[str, object], status: int, says: str
) -> None:
    response = crew.client.post(f"{BASE}/channels", headers=crew.headers("alice"), json=body)
    assert response.status_code == status, response.text
    assert says in response.json()["error"]["message"]
    listed = crew.client.get(f"{BASE}/channels", headers=crew.headers("alice"))
    assert listed.json() == {"channels": []}


def test_names_are_unique_per_project_and_a_kind_never_changes(
    crew: Team, receiver: WebhookReceiver
) -> None:
    headers = crew.headers("alice")
    channel = _channel(crew, receiver)
    name = crew.client.get(f"{BASE}/channels/{channel}", headers=headers).json()["name"]
    body = {"kind": "slack", "name": name, "url": receiver.url()}
    again = crew.client.post(f"{BASE}/channels", headers=headers, json=body)
    assert again.status_code == 409
    changed = crew.client.patch(f"{BASE}/channels/{channel}", headers=headers,
                                json={"kind": "slack"})  # fmt: skip
    assert changed.status_code == 422


# aiosmtpd itself sets the deprecated Session.login_data on each successful login.
@pytest.mark.filterwarnings("ignore:Session.login_data is deprecated")
def test_an_email_channel_sends_its_test_through_smtp(crew: Team, tmp_path: Path) -> None:
    certificates = make_certificate(tmp_path)
    context = crew.client.app.state.context  # type: ignore[attr-defined]
    with SmtpServer(certificates) as server:
        context.settings = context.settings.model_copy(update={
            "notify_smtp_port": server.port, "notify_smtp_username": server.user,
            "notify_smtp_password": SecretStr(server.password),
            "notify_smtp_ca_file": certificates[0],
        })  # fmt: skip
        headers = crew.headers("alice")
        made = crew.client.post(f"{BASE}/channels", headers=headers, json={
            "kind": "email", "name": "ops", "recipients": ["ops@example.org"],
        })  # fmt: skip
        assert made.status_code == 201, made.text
        tried = crew.client.post(f"{BASE}/channels/{made.json()['id']}/test", headers=headers)
        assert tried.json() == {"delivered": True, "error": None}
        (mail,) = server.mailbox.wait_for(1)
    assert server.mailbox.envelopes == [("tbhub@localhost", ["ops@example.org"])]
    assert mail["Subject"] == "[tbhub] vision: a test message"
    assert "sent by alice: this channel works" in mail.get_payload()
