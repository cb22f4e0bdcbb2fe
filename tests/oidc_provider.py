"""A real OpenID provider for the tests: node's oidc-provider (OpenID Certified), started on a
loopback port with its development login form, and a driver for that form."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import httpx

from tbhub.core.processes import ProcessRef, stop_group
from tests.e2e.harness import wait_until
from tests.ports import free_port

PROVIDER_DIR = Path(__file__).parent / "oidc"
CLIENT_ID = "tbhub-test"
CLIENT_SECRET = "test-client-secret-" + "s" * 32


@dataclass
class Provider:
    issuer: str
    accounts_file: Path

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def set_account(self, login: str, **claims: object) -> None:
        accounts = json.loads(self.accounts_file.read_text())
        accounts[login] = claims
        self.accounts_file.write_text(json.dumps(accounts))


@contextmanager
def oidc_provider(tmp_path: Path, redirect_uris: list[str]) -> Iterator[Provider]:
    node = shutil.which("node")
    if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").exists():
        raise AssertionError("the OIDC tests need node and `npm ci --prefix tests/oidc`")
    port = free_port()
    accounts = tmp_path / "oidc-accounts.json"
    accounts.write_text("{}")
    clients = [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                "redirect_uris": redirect_uris}]  # fmt: skip
    log = open(tmp_path / "oidc-provider.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [node, "provider.mjs", str(port), json.dumps(clients), str(accounts)],
        cwd=PROVIDER_DIR, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    ref = ProcessRef.of(process.pid)
    provider = Provider(f"http://127.0.0.1:{port}", accounts)
    try:
        wait_until(lambda: _answers(provider.discovery_url), timeout=30, what="oidc-provider")
        yield provider
    finally:
        stop_group(ref, grace=5, signals=(signal.SIGTERM, signal.SIGKILL))
        process.wait(timeout=5)
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def sign_in_at_provider(authorization_url: str, login: str) -> str:
    """Drive the provider's login and consent forms as a browser would; returns the URL the
    provider sends the browser back to (tbhub's callback with code and state)."""
    with httpx.Client(timeout=10) as browser:
        url, form = authorization_url, {"prompt": "login", "login": login, "password": "x"}
        for _ in range(12):
            response = browser.get(url)
            while response.is_redirect:
                url = urljoin(url, response.headers["location"])
                if "/auth/oidc/callback" in url:
                    return url
                response = browser.get(url)
            action = FORM_ACTION.search(response.text)
            assert action, f"no form at {url}: {response.text[:500]}"
            posted = browser.post(urljoin(url, unescape(action.group(1))), data=form)
            form = {"prompt": "consent"}
            url = urljoin(url, posted.headers["location"])
            if "/auth/oidc/callback" in url:
                return url
    raise AssertionError("the provider never sent the browser back")
