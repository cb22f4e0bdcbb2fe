"""Email through the instance's SMTP server (TBHUB_NOTIFY_SMTP_*): STARTTLS by default and
refused without it, TLS from the first byte, or plain for a local relay; a login when a
user name is set."""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from tbhub.core.settings import Settings
from tbhub.health.notify.digest import Message
from tbhub.health.notify.outbound import DeliveryFailed
from tbhub.health.notify.webhook import DELIVERY_HEADER


def one_line(text: str) -> str:
    """A header value: no line breaks or other control characters (header injection)."""
    return "".join(c if c.isprintable() else " " for c in text)[:200]


def build(settings: Settings, recipients: Sequence[str], message: Message) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"] = one_line(message.subject)
    mail["From"] = settings.notify_smtp_from
    mail["To"] = ", ".join(recipients)
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = make_msgid(domain=settings.notify_smtp_from.rpartition("@")[2] or None)
    mail[DELIVERY_HEADER] = one_line(message.delivery)
    mail.set_content(message.text + "\n\n-- \nSent by tbhub. Choose what reaches you by "
                     "email on your settings page.\n")  # fmt: skip
    return mail


def send_email(settings: Settings, recipients: Sequence[str], message: Message) -> None:
    host = settings.notify_smtp_host
    if not host:
        raise DeliveryFailed("no SMTP server is set (TBHUB_NOTIFY_SMTP_HOST)")
    if not recipients:
        raise DeliveryFailed("no recipients")
    mail = build(settings, recipients, message)
    security, port, timeout = (
        settings.notify_smtp_security, settings.notify_smtp_port, settings.notify_timeout
    )  # fmt: skip
    context = ssl.create_default_context(
        cafile=str(settings.notify_smtp_ca_file) if settings.notify_smtp_ca_file else None
    )
    try:
        smtp = (smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
                if security == "tls" else smtplib.SMTP(host, port, timeout=timeout))  # fmt: skip
        with smtp:
            smtp.ehlo()
            if security == "starttls":
                if not smtp.has_extn("starttls"):
                    raise DeliveryFailed(
                        f"the SMTP server {host}:{port} offers no STARTTLS; mail is not sent "
                        "in the clear (TBHUB_NOTIFY_SMTP_SECURITY)"
                    )
                smtp.starttls(context=context)
                smtp.ehlo()
            if settings.notify_smtp_username:
                if not smtp.has_extn("auth"):
                    raise DeliveryFailed(f"the SMTP server {host}:{port} offers no login (AUTH) "
                                         "here; unset TBHUB_NOTIFY_SMTP_USERNAME or fix the "
                                         "server")  # fmt: skip
                password = settings.notify_smtp_password
                smtp.login(settings.notify_smtp_username,
                           password.get_secret_value() if password else "")  # fmt: skip
            smtp.send_message(mail)
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryFailed(f"the SMTP server {host}:{port} refused the login "
                             f"({exc.smtp_code})") from None  # fmt: skip
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryFailed(f"the SMTP server refused the recipients "
                             f"{', '.join(exc.recipients)}") from None  # fmt: skip
    except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
        raise DeliveryFailed(f"SMTP {host}:{port}: {type(exc).__name__}: {exc}"[:500]) from None
