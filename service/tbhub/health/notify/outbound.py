"""One outbound POST, made safe: the URL checked again now (ssrf.py), the connection made to
the address that check approved (the Host header and TLS server name stay the URL's
host), no redirect followed, no proxy from the environment, one deadline for the whole
exchange and the answer read only up to a cap. Nothing logs the URL: it may be a secret."""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore

from tbhub import __version__
from tbhub.core.errors import InvalidInput
from tbhub.core.settings import Settings
from tbhub.health.notify.ssrf import Resolver, check_url, parse_networks, resolve


class DeliveryFailed(Exception):
    """A message did not go out; `message` says why, and names no secret."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most the cap


def post(
    settings: Settings,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    resolver: Resolver = resolve,
) -> Answer:
    """POST `body` to `url`; DeliveryFailed unless the receiver answers 2xx in time."""
    try:
        where = check_url(url, allow=parse_networks(settings.notify_allow_networks),
                          resolver=resolver)  # fmt: skip
    except InvalidInput as exc:
        raise DeliveryFailed(f"refused: {exc.message}") from None
    parts = urlsplit(url.strip())
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    pinned = httpcore.URL(scheme=where.scheme.encode(), host=str(where.address).encode(),
                          port=where.port, target=target.encode())  # fmt: skip
    host_header = where.host if ":" not in where.host else f"[{where.host}]"
    if where.port != (443 if where.scheme == "https" else 80):
        host_header += f":{where.port}"
    sent_headers = {"User-Agent": f"tbhub/{__version__}", **headers, "Host": host_header,
                    "Content-Length": str(len(body))}  # fmt: skip
    timeout = settings.notify_timeout
    extensions: dict[str, Any] = {
        "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    }
    if where.scheme == "https":
        extensions["sni_hostname"] = where.host  # and the name the certificate must carry
    deadline = time.monotonic() + timeout
    cap = settings.notify_max_response_bytes
    # httpcore, not httpx: httpx logs each request's full URL, and a URL may be a secret.
    try:
        with httpcore.ConnectionPool(retries=0) as pool, pool.stream(
            "POST", pinned, headers=list(sent_headers.items()), content=body,
            extensions=extensions,
        ) as response:  # fmt: skip
            received = bytearray()
            for chunk in response.iter_stream():
                received += chunk
                if len(received) >= cap or time.monotonic() > deadline:
                    break
            status = response.status
    except httpcore.TimeoutException:
        raise DeliveryFailed(f"{where.host} did not answer within {timeout:g} s") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError) as exc:
        # The socket's or TLS's own words (a refused connection, an untrusted certificate);
        # they name no URL.
        why = str(exc) or type(exc).__name__
        raise DeliveryFailed(f"could not reach {where.host}: {why}"[:300]) from None
    if time.monotonic() > deadline:
        raise DeliveryFailed(f"{where.host} took longer than {timeout:g} s")
    if 300 <= status < 400:
        raise DeliveryFailed(
            f"{where.host} answered {status}, a redirect; redirects are never followed: "
            "give the final URL"
        )
    if not 200 <= status < 300:
        raise DeliveryFailed(f"{where.host} answered {status}")
    return Answer(status=status, body=bytes(received[:cap]))
