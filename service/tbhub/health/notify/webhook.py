"""The generic webhook: the incident(s) as JSON, signed so the receiver can tell tbhub sent it.

The signature is HMAC-SHA256, keyed with the channel's secret, over `<timestamp>.<body>`
(the timestamp as sent in X-Tbhub-Timestamp, a dot, the body's exact bytes), sent as
`X-Tbhub-Signature: sha256=<hex>`. A receiver recomputes it, compares in constant time,
and refuses a timestamp more than a few minutes old (a replay). X-Tbhub-Delivery names
the message: the same value twice is a repeat (a retry after a crash).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

from tbhub.core.settings import Settings
from tbhub.health.notify.digest import Message
from tbhub.health.notify.outbound import post

SIGNATURE_HEADER = "X-Tbhub-Signature"
TIMESTAMP_HEADER = "X-Tbhub-Timestamp"
DELIVERY_HEADER = "X-Tbhub-Delivery"


def document(message: Message) -> dict[str, Any]:
    return {
        "type": message.kind,  # incident | digest | test
        "delivery": message.delivery,
        "project": message.project,
        "subject": message.subject,
        "text": message.text,
        "incidents": list(message.incidents),
    }


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def send_webhook(settings: Settings, url: str, secret: str, message: Message) -> None:
    body = json.dumps(document(message), separators=(",", ":"), sort_keys=True).encode()
    timestamp = str(int(time.time()))
    post(settings, url, body, {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(secret, timestamp, body),
        DELIVERY_HEADER: message.delivery,
    })  # fmt: skip
