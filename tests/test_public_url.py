"""Behind a TLS site with a wrong TBHUB_PUBLIC_URL, sign-in is refused as cross-site: the
page says which TBHUB_PUBLIC_URL to set, the log says it once per address, and `tbhub serve`
warns at start-up about a public URL that is likely wrong."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.http.public_url import startup_warning
from tests.forms import form_token
from tests.test_api import PASSWORD, seed

SITE = "https://tbhub.example.com"


def test_a_sign_in_from_the_real_site_says_to_set_the_public_url_and_logs_it_once(
    client: TestClient,
    factory: sessionmaker[Session],
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed(factory, settings)
    browser = {"Origin": SITE, "Sec-Fetch-Site": "same-origin", "Accept": "text/html"}
    caplog.set_level(logging.WARNING, logger="tbhub")
    for _ in range(3):
        data = {"username": "alice", "password": PASSWORD, "csrf_token": form_token(client)}
        response = client.post("/auth/login", data=data, headers=browser)
        assert response.status_code == 403
        assert f"TBHUB_PUBLIC_URL={SITE}" in response.text
    logged = [r.getMessage() for r in caplog.records if "TBHUB_PUBLIC_URL" in r.getMessage()]
    assert len(logged) == 1 and f"set TBHUB_PUBLIC_URL={SITE}" in logged[0]
    # A page on another site (the browser says so) is an attack: no advice, nothing logged.
    data = {"username": "alice", "password": PASSWORD, "csrf_token": form_token(client)}
    attack = {**browser, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    response = client.post("/auth/login", data=data, headers=attack)
    assert response.status_code == 403 and "TBHUB_PUBLIC_URL" not in response.text
    assert not [r for r in caplog.records if "evil.example" in r.getMessage()]


def test_serve_warns_at_start_up_about_a_public_url_that_is_likely_wrong(tmp_path: Path) -> None:
    base = {"data_dir": tmp_path, "secret_key": "s" * 40}
    assert startup_warning(Settings(**base)) is None  # loopback only: the default is right
    behind_tls = {"trusted_proxies": ["10.0.0.0/8"], "public_url": "http://tbhub.example"}
    for risky in ({"http_host": "0.0.0.0"}, {"trusted_proxies": ["127.0.0.1"]}, behind_tls):
        warning = startup_warning(Settings(**base, **risky))
        assert warning is not None and "TBHUB_PUBLIC_URL" in warning, risky
    right = Settings(**base, trusted_proxies=["127.0.0.1"], public_url=SITE)
    assert startup_warning(right) is None
