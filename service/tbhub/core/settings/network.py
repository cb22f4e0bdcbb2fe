"""The network settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

import ipaddress
import os
import re
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")  # fmt: skip
# Addresses that mean "every interface": nobody opens them in a browser.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})
MAX_API_WORKERS = 16
DEFAULT_API_WORKERS_CAP = 4  # the default's ceiling, however many cores the host has


def default_api_workers() -> int:
    """One process per core this process may run on, at most DEFAULT_API_WORKERS_CAP: a
    single process's interpreter lock was the limit of uploads and registrations (see
    docs/operations/replicas.md), and an idle worker costs only its memory."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, DEFAULT_API_WORKERS_CAP))


class NetworkSettings(BaseModel):
    """Network: where tbhub listens, its public address, the proxies in front of it."""

    public_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The address people open in a browser (http:// or https://, no query). "
        "Defaults to http://<http_host>:<http_port> (127.0.0.1 for 0.0.0.0 or ::).",
    )
    http_host: str = Field(
        default="127.0.0.1",
        description="Address nginx listens on: an IP address (0.0.0.0 or :: for every "
        "interface) or a host name.",
    )
    http_port: int = Field(default=8080, ge=1, le=65535, description="Port nginx listens on.")
    api_port: int = Field(
        default=8081,
        ge=1,
        le=65535,
        description="Loopback port of the control plane behind nginx.",
    )
    api_workers: int = Field(
        default_factory=default_api_workers,
        ge=1,
        le=MAX_API_WORKERS,
        description="Processes that answer the control plane's HTTP (the API, the pages, the "
        "auth hook), nginx spreading requests across them; by default one per core, at "
        f"most {DEFAULT_API_WORKERS_CAP}. One of them also runs this replica's supervisor, "
        "watcher, run health and jobs; uploads go to the others while they answer.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="JSON list of addresses or CIDR ranges of proxies in front of tbhub's nginx "
        "(a TLS site, a load balancer) whose X-Forwarded-For nginx believes, so the client "
        'address (sign-in throttling, audit) is the browser\'s: e.g. ["127.0.0.1"].',
    )
    board_domain: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$",
        description="Serve each board on its own origin, <project>.<board_domain> (a "
        "wildcard DNS name pointing at nginx), with a cookie of its own, instead of under "
        "/boards/ on tbhub's origin. See 'Path mode or own-origin mode'.",
    )
    nginx_bin: str = Field(default="nginx", description="Path to the nginx binary.")
    # Several `tbhub serve` on one PostgreSQL: one supervisor leader (DESIGN.md decision 12).
    leader_retry_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds between a standby replica's tries for the supervisor leader's "
        "lock (PostgreSQL only); a dead leader is replaced about this long after PostgreSQL "
        "drops its connection.",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: list[str]) -> list[str]:
        """Each entry as nginx gets it: a network in its canonical form."""
        networks = []
        for entry in value:
            try:
                networks.append(str(ipaddress.ip_network(entry, strict=False)))
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an address or CIDR range (like 10.0.0.0/8)"
                ) from None
        return networks

    @field_validator("http_host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
        if not HOST_NAME.match(value):
            raise ValueError(
                f"{value[:80]!r} is not an IP address or host name; use e.g. 127.0.0.1, or "
                "0.0.0.0 for every interface"
            )
        return value

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.query or parts.fragment or parts.username):  # fmt: skip
            raise ValueError(
                f"{value[:80]!r} is not an http:// or https:// address without a query, e.g. "
                "https://tbhub.example.org"
            )
        return value.rstrip("/")
