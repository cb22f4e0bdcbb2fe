"""The notification settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator


class NotifySettings(BaseModel):
    """Notifications: the SMTP server for email, which networks webhooks may reach, and how
    the outbox folds, retries and bounds what it sends."""

    notify_smtp_host: str | None = Field(
        default=None,
        max_length=255,
        description="The SMTP server email notifications go through. Unset: no email "
        "channels and no per-user email.",
    )
    notify_smtp_port: int = Field(
        default=587, ge=1, le=65535, description="The SMTP server's port (587: submission)."
    )
    notify_smtp_security: str = Field(
        default="starttls",
        pattern="^(starttls|tls|none)$",
        description="starttls: upgrade the connection with STARTTLS and refuse a server "
        "without it; tls: TLS from the first byte (port 465); none: plain text (a relay on "
        "the same host only).",
    )
    notify_smtp_username: str | None = Field(
        default=None, max_length=255, description="The SMTP login; unset: no authentication."
    )
    notify_smtp_password: SecretStr | None = Field(
        default=None, description="The SMTP password (never logged)."
    )
    notify_smtp_from: str = Field(
        default="tbhub@localhost",
        max_length=255,
        description="The From address of notification emails.",
    )
    notify_smtp_ca_file: Path | None = Field(
        default=None,
        description="A PEM file of the certificate authorities trusted for the SMTP "
        "server's certificate. Unset: the system's.",
    )
    notify_allow_networks: list[str] = Field(
        default_factory=list,
        description="Address ranges webhooks may reach although they are private, loopback "
        'or link-local, as a JSON list of CIDR ranges (e.g. ["10.20.0.0/16"]). Unset: only '
        "public addresses.",
    )
    notify_timeout: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="Seconds a webhook or SMTP exchange may take in all before it counts "
        "as failed.",
    )
    notify_max_response_bytes: int = Field(
        default=65536,
        ge=1024,
        le=16 * 1024 * 1024,
        description="A webhook's answer is read up to this many bytes and the rest dropped.",
    )
    notify_fold_seconds: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="At most one message per channel (or user) and project within this "
        "many seconds; what comes in between goes out as one digest. 0: no folding.",
    )
    notify_max_attempts: int = Field(
        default=8,
        ge=1,
        le=100,
        description="Tries per message before it is recorded as failed on its channel.",
    )
    notify_retry_backoff: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds before the first retry; each further retry waits twice as "
        "long, up to an hour.",
    )
    notify_keep_days: float = Field(
        default=7.0,
        gt=0,
        le=3650,
        description="Days sent and failed messages stay in the outbox (for the channel's "
        "history) before they are deleted.",
    )

    @field_validator("notify_allow_networks")
    @classmethod
    def _check_networks(cls, value: list[str]) -> list[str]:
        """Each entry a network in its canonical form; a host address is its own /32."""
        canonical = []
        for entry in value:
            try:
                canonical.append(str(ipaddress.ip_network(entry.strip(), strict=False)))
            except ValueError:
                raise ValueError(
                    f"{entry[:80]!r} is not an address or CIDR range (like 10.20.0.0/16)"
                ) from None
        return canonical
