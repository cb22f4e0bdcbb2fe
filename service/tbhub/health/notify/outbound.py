"""One outbound POST, made safe: the URL checked again now (ssrf.py), the connection made to
the address that check approved (the Host header and TLS server name stay the URL's
host), no redirect followed, no proxy from the environment, one deadline for the whole
exchange and the answer read only up to a cap."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

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
    pinned = httpx.URL(url).copy_with(host=str(where.address))
    host_header = where.host if ":" not in where.host else f"[{where.host}]"
    default_port = 443 if where.scheme == "https" else 80
    if where.port != default_port:
        host_header += f":{where.port}"
    request_headers = {
        "User-Agent": f"tbhub/{__version__}",
        **headers,
        "Host": host_header,
    }
    extensions = {"sni_hostname": where.host} if where.scheme == "https" else {}
    deadline = time.monotonic() + settings.notify_timeout
    cap = settings.notify_max_response_bytes
    try:
        with httpx.Client(
            timeout=settings.notify_timeout, follow_redirects=False, trust_env=False
        ) as client:
            request = client.build_request(
                "POST", pinned, content=body, headers=request_headers, extensions=extensions
            )
            response = client.send(request, stream=True)
            try:
                received = bytearray()
                for chunk in response.iter_bytes():
                    received += chunk
                    if len(received) >= cap or time.monotonic() > deadline:
                        break
                status = response.status_code
            finally:
                response.close()
    except httpx.TimeoutException:
        raise DeliveryFailed(
            f"{where.host} did not answer within {settings.notify_timeout:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"could not reach {where.host}: {type(exc).__name__}") from None
    if time.monotonic() > deadline:
        raise DeliveryFailed(f"{where.host} took longer than {settings.notify_timeout:g} s")
    if 300 <= status < 400:
        raise DeliveryFailed(
            f"{where.host} answered {status}, a redirect; redirects are never followed: "
            "give the final URL"
        )
    if not 200 <= status < 300:
        raise DeliveryFailed(f"{where.host} answered {status}")
    return Answer(status=status, body=bytes(received[:cap]))
