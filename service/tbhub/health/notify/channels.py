"""A project's notification channels, as owners manage them, and the email preferences each
user sets. Secrets go in and never come out: a webhook's secret is shown once when tbhub
makes it, a URL (a Slack URL is a credential) only as its scheme and host."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.core.errors import AlreadyExists, InvalidInput, NotFound
from tbhub.core.models import Delivery, EmailPreference, NotificationChannel, Project, User
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.domain import audit
from tbhub.health.notify.digest import compose
from tbhub.health.notify.send import KINDS, DeliveryFailed, Target, send
from tbhub.health.notify.ssrf import check_url, parse_networks
from tbhub.health.rules import DETECTORS

MAX_CHANNELS = 20  # per project
MAX_RECIPIENTS = 20
EMAIL_MAX = 254
EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
SECRET_MIN = 16
HISTORY = 50  # deliveries listed per channel


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ChannelInput:
    """What an owner gives; None leaves a field as it is (on an update)."""

    name: str | None = None
    kind: str | None = None
    url: str | None = None
    secret: str | None = None
    recipients: list[str] | None = None
    detectors: list[str] | None = None
    enabled: bool | None = None


def check_email(address: str) -> str:
    address = address.strip()
    if len(address) > EMAIL_MAX or not EMAIL.match(address):
        raise InvalidInput(f"{address[:80]!r} is not an email address like name@example.org")
    return address


def check_detectors(detectors: list[str]) -> list[str]:
    unknown = sorted(set(detectors) - set(DETECTORS))
    if unknown:
        raise InvalidInput(
            f"unknown incident kind {', '.join(map(repr, unknown))}; the kinds are "
            f"{', '.join(DETECTORS)}"
        )
    return sorted(set(detectors), key=DETECTORS.index)


def project_id(session: Session, project: str) -> int:
    found = session.scalar(select(Project.id).where(Project.name == project))
    if found is None:
        raise NotFound(f"no project named {project!r}")
    return found


def get_channel(session: Session, *, project: str, channel_id: int) -> NotificationChannel:
    channel = session.get(NotificationChannel, channel_id)
    if channel is None or channel.project_id != project_id(session, project):
        raise NotFound(f"no channel {channel_id} in {project}; list them with GET "
                       f"/api/v1/projects/{project}/channels")  # fmt: skip
    return channel


def list_channels(session: Session, *, project: str) -> list[NotificationChannel]:
    return list(session.scalars(
        select(NotificationChannel)
        .where(NotificationChannel.project_id == project_id(session, project))
        .order_by(NotificationChannel.id)
    ))  # fmt: skip


def create_channel(
    session: Session, settings: Settings, *, project: str, given: ChannelInput, actor: str
) -> tuple[NotificationChannel, str | None]:
    """The new channel, and the webhook secret tbhub made for it (to show this once)."""
    pid = project_id(session, project)
    if len(list_channels(session, project=project)) >= MAX_CHANNELS:
        raise InvalidInput(f"{project} has {MAX_CHANNELS} channels, the most a project may "
                           "have; delete one first")  # fmt: skip
    if given.kind not in KINDS:
        raise InvalidInput(f"kind must be one of {', '.join(KINDS)}")
    made = None
    if given.kind == "webhook" and given.secret is None:
        made = secrets.token_urlsafe(32)
    channel = NotificationChannel(
        project_id=pid, name=given.name or given.kind, kind=given.kind, recipients=[],
        detectors=[], enabled=True, created_by=actor,
    )  # fmt: skip
    apply(session, settings, channel, replace(given, secret=given.secret or made))
    session.add(channel)
    session.flush()
    audit.record(session, actor=actor, action="channel.create", target=project,
                 channel=channel.id, kind=channel.kind)  # fmt: skip
    return channel, made


def update_channel(
    session: Session, settings: Settings, *, project: str, channel_id: int,
    given: ChannelInput, actor: str,
) -> NotificationChannel:  # fmt: skip
    channel = get_channel(session, project=project, channel_id=channel_id)
    if given.kind is not None and given.kind != channel.kind:
        raise InvalidInput("a channel's kind cannot change; make a new channel")
    apply(session, settings, channel, given)
    channel.updated_at = utcnow()
    audit.record(session, actor=actor, action="channel.update", target=project,
                 channel=channel.id, fields=sorted(k for k, v in given.__dict__.items()
                                                   if v is not None))  # fmt: skip
    return channel


def apply(
    session: Session, settings: Settings, channel: NotificationChannel, given: ChannelInput
) -> None:
    """Check and set each given field; a URL is checked as a send would check it."""
    if given.name is not None:
        taken = session.scalar(select(NotificationChannel.id).where(
            NotificationChannel.project_id == channel.project_id,
            NotificationChannel.name == given.name,
        ))  # fmt: skip
        if taken is not None and taken != channel.id:
            raise AlreadyExists(f"this project has a channel named {given.name!r} already")
        channel.name = given.name
    if given.url is not None:
        if channel.kind == "email":
            raise InvalidInput("an email channel has recipients, not a URL")
        check_url(given.url, allow=parse_networks(settings.notify_allow_networks))
        channel.url = given.url.strip()
    if given.secret is not None:
        if channel.kind != "webhook":
            raise InvalidInput("only a webhook channel has a signing secret")
        if len(given.secret) < SECRET_MIN:
            raise InvalidInput(f"the secret must have at least {SECRET_MIN} characters")
        channel.secret = given.secret
    if given.recipients is not None:
        if channel.kind != "email":
            raise InvalidInput("only an email channel has recipients")
        channel.recipients = [check_email(address) for address in given.recipients]
    if given.detectors is not None:
        channel.detectors = check_detectors(given.detectors)
    if given.enabled is not None:
        channel.enabled = given.enabled
    if channel.kind in ("webhook", "slack") and not channel.url:
        raise InvalidInput(f"a {channel.kind} channel needs its url")
    if channel.kind == "email":
        if not channel.recipients:
            raise InvalidInput("an email channel needs at least one address in recipients")
        if not settings.notify_smtp_host:
            raise InvalidInput("this instance sends no email: an admin sets "
                               "TBHUB_NOTIFY_SMTP_HOST first")  # fmt: skip


def delete_channel(session: Session, *, project: str, channel_id: int, actor: str) -> None:
    channel = get_channel(session, project=project, channel_id=channel_id)
    session.delete(channel)
    audit.record(session, actor=actor, action="channel.delete", target=project,
                 channel=channel_id)  # fmt: skip


def masked_url(url: str | None) -> str | None:
    """Scheme and host only: the path of a Slack (or any) webhook URL is its credential."""
    if url is None:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"


def describe(channel: NotificationChannel) -> dict[str, Any]:
    return {
        "id": channel.id,
        "name": channel.name,
        "kind": channel.kind,
        "url": masked_url(channel.url),
        "has_secret": channel.secret is not None,
        "recipients": list(channel.recipients or []),
        "detectors": list(channel.detectors or []),
        "enabled": channel.enabled,
        "created_by": channel.created_by,
        "created_at": iso_utc(channel.created_at),
        "last_sent_at": iso_utc(channel.last_sent_at),
        "last_error": channel.last_error,
        "last_error_at": iso_utc(channel.last_error_at),
    }


def history(session: Session, *, project: str, channel_id: int) -> list[dict[str, Any]]:
    """The channel's newest deliveries, with how each went."""
    channel = get_channel(session, project=project, channel_id=channel_id)
    rows = session.scalars(
        select(Delivery).where(Delivery.channel_id == channel.id)
        .order_by(Delivery.id.desc()).limit(HISTORY)
    )  # fmt: skip
    return [
        {
            "id": row.id,
            "incident_id": row.incident_id,
            "detector": row.payload.get("detector"),
            "state": row.state,
            "attempts": row.attempts,
            "created_at": iso_utc(row.created_at),
            "sent_at": iso_utc(row.sent_at),
            "last_error": row.last_error,
        }
        for row in rows
    ]


def send_test(
    session: Session, settings: Settings, *, project: str, channel_id: int, actor: str
) -> dict[str, Any]:
    """Send a test message now, past the outbox (the owner waits for the answer); what
    happened is also recorded on the channel."""
    channel = get_channel(session, project=project, channel_id=channel_id)
    now = utcnow()
    payload = {
        "id": None, "project_id": channel.project_id, "project": project, "run_id": None,
        "run_path": None, "tag": None, "detector": "test", "severity": "info",
        "message": f"A test from tbhub, sent by {actor}: this channel works.",
        "first_seen": now.isoformat(),
    }  # fmt: skip
    message = compose(project, [payload], public_url=settings.public_url,
                      delivery=f"test-{channel.id}-{int(now.timestamp())}")  # fmt: skip
    try:
        send(settings, Target.of_channel(channel), message)
    except DeliveryFailed as exc:
        channel.last_error, channel.last_error_at = exc.message, now
        return {"delivered": False, "error": exc.message}
    channel.last_sent_at = now
    audit.record(session, actor=actor, action="channel.test", target=project,
                 channel=channel.id)  # fmt: skip
    return {"delivered": True, "error": None}


# -- email preferences ------------------------------------------------------------------------


def describe_preference(pref: EmailPreference, project: str) -> dict[str, Any]:
    return {
        "project": project,
        "address": pref.address,
        "detectors": list(pref.detectors or []),
        "own_runs_only": pref.own_runs_only,
        "last_error": pref.last_error,
        "last_error_at": iso_utc(pref.last_error_at),
    }


def list_preferences(session: Session, *, user_id: int) -> list[dict[str, Any]]:
    rows = session.execute(
        select(EmailPreference, Project.name)
        .join(Project, Project.id == EmailPreference.project_id)
        .where(EmailPreference.user_id == user_id)
        .order_by(Project.name)
    )
    return [describe_preference(pref, name) for pref, name in rows]


def set_preference(
    session: Session, settings: Settings, *, user_id: int, project: str,
    address: str | None, detectors: list[str], own_runs_only: bool,
) -> dict[str, Any]:  # fmt: skip
    """Email from `project` for this user (who may read it: the caller checks)."""
    if not settings.notify_smtp_host:
        raise InvalidInput("this instance sends no email: an admin sets TBHUB_NOTIFY_SMTP_HOST")
    user = session.get(User, user_id)
    assert user is not None
    address = address or user.email
    if not address:
        raise InvalidInput("your account has no email address: give one in address")
    pid = project_id(session, project)
    pref = session.get(EmailPreference, (user_id, pid))
    if pref is None:
        pref = EmailPreference(user_id=user_id, project_id=pid)
        session.add(pref)
    pref.address = check_email(address)
    pref.detectors = check_detectors(detectors)
    pref.own_runs_only = own_runs_only
    pref.updated_at = utcnow()
    pref.last_error = pref.last_error_at = None
    session.flush()
    return describe_preference(pref, project)


def delete_preference(session: Session, *, user_id: int, project: str) -> bool:
    """No more email from `project`; False if none was asked for."""
    pref = session.get(EmailPreference, (user_id, project_id(session, project)))
    if pref is not None:
        session.delete(pref)
    return pref is not None
