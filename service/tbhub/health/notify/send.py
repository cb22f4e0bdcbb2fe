"""One message to one target, by its kind: webhook, Slack-format webhook or email."""

from __future__ import annotations

from dataclasses import dataclass

from tbhub.core.models import NotificationChannel
from tbhub.core.settings import Settings
from tbhub.health.notify.digest import Message
from tbhub.health.notify.email import send_email
from tbhub.health.notify.outbound import DeliveryFailed
from tbhub.health.notify.slack import send_slack
from tbhub.health.notify.webhook import send_webhook

__all__ = ["DeliveryFailed", "Target", "send"]

KINDS = ("webhook", "slack", "email")


@dataclass(frozen=True)
class Target:
    kind: str  # webhook | slack | email
    url: str | None = None
    secret: str | None = None
    recipients: tuple[str, ...] = ()

    @classmethod
    def of_channel(cls, channel: NotificationChannel) -> Target:
        return cls(kind=channel.kind, url=channel.url, secret=channel.secret,
                   recipients=tuple(channel.recipients or ()))  # fmt: skip


def send(settings: Settings, target: Target, message: Message) -> None:
    """Raises DeliveryFailed saying why the message did not go out."""
    if target.kind == "webhook" and target.url and target.secret:
        send_webhook(settings, target.url, target.secret, message)
    elif target.kind == "slack" and target.url:
        send_slack(settings, target.url, message)
    elif target.kind == "email":
        send_email(settings, target.recipients, message)
    else:
        raise DeliveryFailed(f"a {target.kind} channel without its URL or secret")
