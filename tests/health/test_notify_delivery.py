"""The outbox end to end with real receivers: a signed webhook checked by an HTTP server on
loopback, a Slack-format webhook, email through a real SMTP server (STARTTLS and a login),
per-user email preferences, retries with backoff, the final failure on the channel, and a
storm folded into one digest."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import (
    Base,
    Delivery,
    EmailPreference,
    Incident,
    NotificationChannel,
    Role,
    Run,
    RunSource,
    RunStatus,
    User,
)
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.domain.projects import create_project, set_membership
from tbhub.domain.users import create_user
from tbhub.health.notify.channels import describe
from tbhub.health.notify.outbox import DeliveryWorker, delivery_totals, enqueue
from tests.health.notify_receivers import (
    SmtpServer,
    WebhookReceiver,
    make_certificate,
    signature_ok,
)

# aiosmtpd itself sets the deprecated Session.login_data on each successful login, and
# warns about AUTH without STARTTLS even where TLS is on from the first byte.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Session.login_data is deprecated"),
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]
SECRET = "s3cret-for-the-receiver-only"


class Clock:
    """The worker's time, moved by the test (backoff and folding are minutes long). It starts
    an hour after the real time, on a whole second: deliveries are made at the real time and
    must be due at once (a clock fixed at one date failed every run after that hour)."""

    def __init__(self) -> None:
        self.start = self.now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def notify(settings: Settings) -> Settings:
    """The settings with loopback allowed (the receivers live there) and short waits."""
    return settings.model_copy(update={
        "notify_allow_networks": ["127.0.0.1/32"], "notify_timeout": 5.0,
        "notify_retry_backoff": 1.0, "notify_max_attempts": 3, "notify_fold_seconds": 60.0,
    })  # fmt: skip


@pytest.fixture
def project(factory: sessionmaker[Session], settings: Settings) -> int:
    with transaction(factory) as session:
        for name in ("ann", "ben", "cid"):
            create_user(session, name=name, password=None, is_admin=False, actor="test")
        row = create_project(session, name="vision", storage_root=settings.storage,
                             owner="ann", actor="test")  # fmt: skip
        set_membership(session, project="vision", user="ben", role=Role.viewer, actor="test")
        return row.id


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


def add_channel(factory: sessionmaker[Session], project_id: int, **fields: object) -> int:
    with transaction(factory) as session:
        channel = NotificationChannel(project_id=project_id, created_by="ann",
                                      **{"name": str(fields.get("kind")), **fields})  # fmt: skip
        session.add(channel)
        session.flush()
        return channel.id


def raise_incident(
    factory: sessionmaker[Session], project_id: int, *, detector: str = "nan",
    run: str = "exp/run-1", run_id: int | None = None,
) -> int:  # fmt: skip
    """An incident as the monitor records it: the row, then enqueue in the same transaction."""
    with transaction(factory) as session:
        incident = Incident(
            project_id=project_id, run_id=run_id, run_path=run, tag="train/loss",
            detector=detector, severity="error", step=120, value=None, value_text="nan",
            message=f"train/loss is NaN at step 120 ({run})",
        )  # fmt: skip
        session.add(incident)
        session.flush()
        enqueue(session, incident)
        return incident.id


def deliveries(factory: sessionmaker[Session]) -> list[Delivery]:
    with factory() as session:
        return list(session.scalars(select(Delivery).order_by(Delivery.id)))


def test_the_migration_makes_the_tables_the_models_describe(factory: sessionmaker[Session]) -> None:
    ours = {"notification_channels", "email_preferences", "notification_deliveries"}
    with factory() as session:
        context = MigrationContext.configure(session.connection(), opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert [d for d in diff if ours & names_in(d)] == []


def names_in(diff: object) -> set[str]:
    """The table names an autogenerate difference mentions (its items nest tuples of
    strings, tables, columns and indexes)."""
    if isinstance(diff, str):
        return {diff}
    if isinstance(diff, (tuple, list)):
        return set().union(*(names_in(item) for item in diff))
    table = getattr(diff, "table", diff)
    return {str(getattr(table, "name", ""))}


def test_enqueue_only_writes_rows_and_sends_nothing(
    factory: sessionmaker[Session], project: int, receiver: WebhookReceiver
) -> None:
    add_channel(factory, project, kind="webhook", url=receiver.url(), secret=SECRET)
    add_channel(factory, project, kind="webhook", name="off", url=receiver.url(),
                secret=SECRET, enabled=False)  # fmt: skip
    add_channel(factory, project, kind="webhook", name="stalls only", url=receiver.url(),
                secret=SECRET, detectors=["stalled"])  # fmt: skip
    raise_incident(factory, project)
    rows = deliveries(factory)
    assert [(row.state, row.attempts) for row in rows] == [("pending", 0)]
    assert rows[0].payload["value_text"] == "nan"
    assert rows[0].payload["board_path"].startswith("/boards/vision/?runFilter=")
    assert receiver.received == []
    with factory() as session:
        counts, oldest = delivery_totals(session, rows[0].created_at + timedelta(seconds=5))
    assert counts == {"pending": 1, "sending": 0, "sent": 0, "failed": 0, "dropped": 0}
    assert oldest == 5.0


def test_a_webhook_arrives_signed_once(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    channel = add_channel(factory, project, kind="webhook", url=receiver.url(), secret=SECRET)
    incident = raise_incident(factory, project)
    clock = Clock()
    DeliveryWorker(notify, factory, clock=clock).run_once()
    (request,) = receiver.wait_for(1)
    assert signature_ok(SECRET, request)
    assert not signature_ok("another secret of the same length", request)
    body = json.loads(request.body)
    assert body["type"] == "incident" and body["project"] == "vision"
    assert [(i["id"], i["detector"], i["value_text"]) for i in body["incidents"]] == [
        (incident, "nan", "nan")
    ]
    assert body["incidents"][0]["link"].startswith(f"{notify.public_url}/boards/vision/")
    assert request.headers["X-Tbhub-Delivery"] == str(deliveries(factory)[0].id)
    assert request.headers["Content-Type"] == "application/json"
    assert [row.state for row in deliveries(factory)] == ["sent"]
    with factory() as session:
        assert session.get(NotificationChannel, channel).last_sent_at == clock.start  # type: ignore[union-attr]


def test_a_slack_format_webhook_gets_text_and_blocks(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    add_channel(factory, project, kind="slack", url=receiver.url("/services/T0/B0/xyz"))
    raise_incident(factory, project, run="exp/<!channel>@here")
    DeliveryWorker(notify, factory, clock=Clock()).run_once()
    (request,) = receiver.wait_for(1)
    assert request.path == "/services/T0/B0/xyz"
    assert "X-Tbhub-Signature" not in request.headers
    body = json.loads(request.body)
    # A run's name can neither format nor mention: <, > and & escaped, @ defused.
    shown = "exp/&lt;!channel&gt;@\u200bhere"
    assert f"non-finite value in {shown} train/loss" in body["text"]
    assert "train/loss is NaN at step 120" in body["text"]
    assert "<!channel>" not in request.body.decode() and "@here" not in body["text"]
    assert body["blocks"][0]["type"] == "section"
    link = body["blocks"][1]["text"]["text"]  # mrkdwn's <url|label>, & in the URL escaped
    assert link.startswith(f"<{notify.public_url}/boards/vision/?runFilter=")
    assert "&amp;tagFilter=" in link
    assert f"|non-finite value in {shown} train/loss>" in link


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("smtp-tls"))


def with_smtp(settings: Settings, server: SmtpServer, ca: Path | None, **more: object) -> Settings:
    return settings.model_copy(update={
        "notify_smtp_host": "127.0.0.1", "notify_smtp_port": server.port,
        "notify_smtp_username": server.user, "notify_smtp_password": _secret(server.password),
        "notify_smtp_ca_file": ca, "notify_smtp_from": "tbhub@example.org", **more,
    })  # fmt: skip


def _secret(value: str) -> object:
    from pydantic import SecretStr

    return SecretStr(value)


def test_email_goes_over_starttls_with_a_login(
    factory: sessionmaker[Session], project: int, notify: Settings,
    certificates: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    add_channel(factory, project, kind="email", recipients=["ops@example.org", "ml@example.org"])
    raise_incident(factory, project)
    with SmtpServer(certificates) as server:
        settings = with_smtp(notify, server, certificates[0])
        DeliveryWorker(settings, factory, clock=Clock()).run_once()
        (mail,) = server.mailbox.wait_for(1)
    assert server.mailbox.tls == [True] and server.mailbox.logins == ["mailer"]
    assert server.mailbox.envelopes == [
        ("tbhub@example.org", ["ops@example.org", "ml@example.org"])
    ]
    assert mail["Subject"] == "[tbhub] vision: non-finite value in exp/run-1 train/loss"
    body = mail.get_payload(decode=True).decode()  # type: ignore[union-attr]
    assert "train/loss is NaN at step 120" in body and "/boards/vision/" in body
    assert [row.state for row in deliveries(factory)] == ["sent"]


def test_email_goes_over_tls_from_the_first_byte(
    factory: sessionmaker[Session], project: int, notify: Settings,
    certificates: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    add_channel(factory, project, kind="email", recipients=["ops@example.org"])
    raise_incident(factory, project)
    with SmtpServer(certificates, implicit_tls=True) as server:
        settings = with_smtp(notify, server, certificates[0], notify_smtp_security="tls")
        DeliveryWorker(settings, factory, clock=Clock()).run_once()
        server.mailbox.wait_for(1)
    assert server.mailbox.logins == ["mailer"]
    assert server.mailbox.envelopes == [("tbhub@example.org", ["ops@example.org"])]
    assert [row.state for row in deliveries(factory)] == ["sent"]


def test_email_is_not_sent_in_the_clear_to_a_server_without_starttls(
    factory: sessionmaker[Session], project: int, notify: Settings
) -> None:
    add_channel(factory, project, kind="email", recipients=["ops@example.org"])
    raise_incident(factory, project)
    with SmtpServer() as server:
        DeliveryWorker(with_smtp(notify, server, None), factory, clock=Clock()).run_once()
        assert server.mailbox.messages == []
    (row,) = deliveries(factory)
    assert row.state == "pending" and row.attempts == 1
    assert "offers no STARTTLS" in (row.last_error or "")


def test_each_user_gets_the_email_they_asked_for(
    factory: sessionmaker[Session], project: int, notify: Settings,
    certificates: tuple[Path, Path, Path],
) -> None:  # fmt: skip
    """ann (owner): nan only; ben (viewer): anything, on his own runs only; cid asked but
    is no member of the project, so gets nothing."""
    with transaction(factory) as session:
        ids: dict[str, int] = {}
        for user, address, detectors, own in (
            ("ann", "ann@example.org", ["nan"], False),
            ("ben", "ben@example.org", [], True),
            ("cid", "cid@example.org", [], False),
        ):
            user_id = session.scalar(select(User.id).where(User.name == user))
            session.add(EmailPreference(user_id=user_id, project_id=project, address=address,
                                        detectors=detectors, own_runs_only=own))  # fmt: skip
        for name, owner in (("bens-run", "ben"), ("anns-run", "ann")):
            run = Run(project_id=project, path=name, name=name, status=RunStatus.running,
                      source=RunSource.api, created_by=owner)  # fmt: skip
            session.add(run)
            session.flush()
            ids[name] = run.id
    raise_incident(factory, project, detector="nan", run="bens-run", run_id=ids["bens-run"])
    raise_incident(factory, project, detector="divergence", run="anns-run",
                   run_id=ids["anns-run"])  # fmt: skip
    with SmtpServer(certificates) as server:
        settings = with_smtp(notify, server, certificates[0], notify_fold_seconds=0.0)
        DeliveryWorker(settings, factory, clock=Clock()).run_once()
        server.mailbox.wait_for(2)
    got = sorted((rcpt[0], m["Subject"]) for (_, rcpt), m in
                 zip(server.mailbox.envelopes, server.mailbox.messages, strict=True))  # fmt: skip
    assert got == [
        ("ann@example.org", "[tbhub] vision: non-finite value in bens-run train/loss"),
        ("ben@example.org", "[tbhub] vision: non-finite value in bens-run train/loss"),
    ]


def test_a_failing_receiver_is_retried_with_backoff_then_the_failure_shows_on_the_channel(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    channel = add_channel(factory, project, kind="webhook", url=receiver.url(), secret=SECRET)
    receiver.answer.status = 500
    raise_incident(factory, project)
    clock = Clock()
    worker = DeliveryWorker(notify, factory, clock=clock)
    tries = []
    for step in (0, 0.5, 0.5, 1, 0.5, 0.5):  # backoff 1 s, then 2 s; three tries in all
        clock.advance(step)
        worker.run_once()
        tries.append(len(receiver.received))
    assert tries == [1, 1, 2, 2, 2, 3]
    (row,) = deliveries(factory)
    assert (row.state, row.attempts) == ("failed", 3)
    with factory() as session:
        shown = describe(session.get(NotificationChannel, channel))  # type: ignore[arg-type]
    assert shown["last_error"] == "127.0.0.1 answered 500"
    assert shown["last_error_at"] == iso_utc(clock.start + timedelta(seconds=3))
    clock.advance(3600)
    worker.run_once()
    assert len(receiver.received) == 3  # a failed delivery is never tried again
    with factory() as session:
        counts, oldest = delivery_totals(session, clock.now)
    assert (counts["failed"], counts["pending"], oldest) == (1, 0, None)


def test_a_storm_within_a_minute_goes_out_as_one_digest(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    add_channel(factory, project, kind="webhook", url=receiver.url(), secret=SECRET)
    clock = Clock()
    worker = DeliveryWorker(notify, factory, clock=clock)
    raise_incident(factory, project, run="exp/first")
    worker.run_once()
    assert len(receiver.wait_for(1)) == 1
    for n in range(25):
        raise_incident(factory, project, run=f"exp/storm-{n}",
                       detector="divergence" if n % 5 else "nan")  # fmt: skip
    for seconds in (10, 20, 29.5):  # still within the first message's minute
        clock.advance(seconds)
        worker.run_once()
    assert len(receiver.received) == 1
    clock.advance(0.5)  # a minute after the first message
    worker.run_once()
    first, digest = receiver.wait_for(2)
    assert json.loads(first.body)["type"] == "incident"
    body = json.loads(digest.body)
    assert body["type"] == "digest" and len(body["incidents"]) == 25
    assert body["subject"] == "[tbhub] vision: 25 incidents (20 divergence, 5 non-finite value)"
    assert body["text"].count("\n- ") == 20 and "… and 5 more" in body["text"]
    assert signature_ok(SECRET, digest)
    assert {row.state for row in deliveries(factory)} == {"sent"}


def test_a_delivery_interrupted_mid_send_is_sent_again_by_the_next_worker(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    add_channel(factory, project, kind="webhook", url=receiver.url(), secret=SECRET)
    raise_incident(factory, project)
    with transaction(factory) as session:  # as a worker killed between claim and answer
        for row in session.scalars(select(Delivery)):
            row.state, row.attempts = "sending", 1
    worker = DeliveryWorker(notify, factory).start()
    try:
        (request,) = receiver.wait_for(1)
    finally:
        worker.stop()
    assert signature_ok(SECRET, request)
    assert [(row.state, row.attempts) for row in deliveries(factory)] == [("sent", 2)]


def test_a_slow_receiver_holds_up_only_its_own_messages(
    factory: sessionmaker[Session], project: int, notify: Settings, receiver: WebhookReceiver
) -> None:
    with WebhookReceiver() as slow:
        slow.answer.delay = 6.0
        add_channel(factory, project, kind="webhook", name="slow", url=slow.url(), secret=SECRET)
        add_channel(factory, project, kind="webhook", name="fast", url=receiver.url(),
                    secret=SECRET)  # fmt: skip
        patient = notify.model_copy(update={"notify_timeout": 10.0})
        worker = DeliveryWorker(patient, factory).start()
        try:
            started = time.monotonic()
            raise_incident(factory, project)
            receiver.wait_for(1)
            fast = time.monotonic() - started
            slow.wait_for(1)
            assert not {row.state for row in deliveries(factory)} <= {"sent"}  # slow: in flight
        finally:
            worker.stop()  # waits for the send in flight
    assert fast < 4.0  # well before the slow receiver answers
    assert [row.state for row in deliveries(factory)] == ["sent", "sent"]
