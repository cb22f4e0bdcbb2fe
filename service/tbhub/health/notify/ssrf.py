"""Where a webhook may point: an http(s) URL whose host resolves only to public addresses.

Checked when a channel is saved and again before each send (a name may resolve elsewhere
by then: DNS rebinding), and the request then goes to the very address checked, never to
a second lookup. Refused: other schemes (file://, gopher://...), credentials in the URL,
an IPv4 address spelled any way but the dotted quad (2130706433, 0177.0.0.1, 0x7f.1: each
is 127.0.0.1 to some resolver), and every loopback, private, link-local (cloud metadata at
169.254.169.254), unique-local, multicast, reserved, IPv4-mapped or tunnelled IPv6
address, unless it is in a range the admin allows (TBHUB_NOTIFY_ALLOW_NETWORKS). A mapped
address is refused even then: allow the IPv4 range and write the IPv4 address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tbhub.core.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[IPAddress]]

URL_MAX = 2048  # notification_channels.url String(2048)
# A name whose last label is a number is an IPv4 address to a URL parser (WHATWG), in
# decimal, octal or hex: `2130706433`, `0177.0.0.1`, `127.1`, `0x7f.0.0.1`.
NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
HOST_LABELS = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$", re.IGNORECASE)


@dataclass(frozen=True)
class Destination:
    """A checked URL and the address a request to it must connect to."""

    url: str
    scheme: str
    host: str  # as the URL names it: the Host header and the TLS server name
    port: int
    address: IPAddress


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for `host` (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


def parse_networks(entries: Sequence[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def check_url(
    url: str, *, allow: Sequence[Network] = (), resolver: Resolver = resolve
) -> Destination:
    """The URL's destination, or InvalidInput saying why a request there is refused."""
    if len(url) > URL_MAX:
        raise InvalidInput(f"the URL is longer than {URL_MAX} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{shown(url)} is not a URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InvalidInput(
            f"{scheme or 'a URL without a scheme'}:// is not allowed: a webhook is an "
            "http:// or https:// URL"
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("a webhook URL may not carry a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise InvalidInput(f"{shown(url)} names no host")
    port = port or (443 if scheme == "https" else 80)
    literal = ip_literal(host)
    if literal is None:
        labels = host.split(".")
        if NUMERIC_LABEL.match(labels[-1]):
            raise InvalidInput(
                f"{shown(host)} is an IP address in a decimal, octal or hex spelling; "
                "write an IPv4 address as four decimal numbers (a.b.c.d)"
            )
        if not all(HOST_LABELS.match(label) for label in labels):
            raise InvalidInput(f"{shown(host)} is not a host name")
    addresses = [literal] if literal is not None else resolver(host, port)
    if not addresses:
        raise InvalidInput(f"the host {shown(host)} does not resolve")
    for address in addresses:
        why = refusal(address, allow)
        if why is not None:
            named = f"{host} resolves to {address}, " if literal is None else f"{address} is "
            raise InvalidInput(
                f"{named}{why}: webhooks reach public addresses only (an admin may allow "
                "ranges with TBHUB_NOTIFY_ALLOW_NETWORKS)"
            )
    return Destination(url=url, scheme=scheme, host=host, port=port, address=addresses[0])


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def refusal(address: IPAddress, allow: Sequence[Network]) -> str | None:
    """Why a request may not go to `address`; None when it may."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return "an IPv4-mapped IPv6 address"
        if address.sixtofour is not None or address.teredo is not None:
            return "an IPv6 address tunnelling IPv4"
    if any(address.version == net.version and address in net for net in allow):
        return None
    for test, words in (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address (where cloud metadata lives)"),
        ("is_unspecified", "the unspecified address"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    ):
        if getattr(address, test):
            return words
    if not address.is_global:
        return "not a public address"
    return None


def shown(text: str) -> str:
    """A URL or host as an error message quotes it: short, and no secret path."""
    parts = text.split("/", 3)
    return repr((parts[0] + "//" + parts[2]) if len(parts) > 3 else text[:80])
