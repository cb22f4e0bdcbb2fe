"""Attacks on what nginx and the control plane tell each other: a cached "let in" answer
keyed on other bytes than the hook judged, an X-Forwarded-For forged to dodge sign-in
throttling, and a token put in the URL that lands in nginx's access log."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.models import AuditEvent
from tbhub.core.settings import Settings
from tbhub.http.proxy_hop import HOP_HEADER, hop_key
from tbhub.serve import nginx as nginx_module
from tbhub.serve.nginx import render_config
from tests.e2e.harness import TbhubServer, wait_until
from tests.forms import form_token
from tests.test_nginx_config import make_settings

LOCATION = re.compile(r"location (.+?) \{\n(.*?)\n        \}", re.S)


def locations(text: str) -> dict[str, str]:
    return {name.strip(): body for name, body in LOCATION.findall(text)}


def cache_key_variables(text: str) -> set[str]:
    """The nginx variables the cache of hook answers is keyed on: in tbhub_gate's Lua
    (nginx with Lua), else in the hook location's proxy_cache_key."""
    lua = re.search(r"table\.concat\(\{(.*?)\}, \"\|\"\)", text, re.S)  # key_of
    if lua is not None:
        return {f"${name}" for name in re.findall(r"var\.(\w+)", lua[1])}
    key = re.search(r'proxy_cache_key "([^"]+)";', locations(text)["= /_auth/board"])
    assert key is not None
    return set(re.findall(r"\$\w+", key[1]))


@pytest.mark.parametrize("lua", [True, False], ids=["shared-memory", "proxy-cache"])
def test_the_auth_cache_key_holds_exactly_the_headers_the_hook_judges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lua: bool
) -> None:
    if not lua:
        monkeypatch.setattr(nginx_module, "lua_modules", lambda binary: [])
    text = render_config(make_settings(tmp_path))
    assert ("tbhub_gate" in text) is lua
    hook = locations(text)["= /_auth/board"]
    judged = r"Host|Cookie|Authorization|X-Tbhub-Original-Uri"
    sent = dict(re.findall(rf"proxy_set_header ({judged}) (\$\w+);", hook))
    assert set(sent) == {"Host", "Cookie", "Authorization", "X-Tbhub-Original-Uri"}
    # The key holds each header's raw bytes as the hook gets them ($http_host, never $host:
    # nginx's lower-cased, port-less reading of the request line or Host); the whole raw URI
    # too, since a restricted dashboard's routes are refused where others are not.
    assert cache_key_variables(text) == {*sent.values(), "$auth_board_project"}
    if lua:
        # An answer the hook says holds for the whole board is also kept without the URI,
        # on the same headers otherwise: the one key function, "*" in the URI's place.
        keys = re.findall(r"table\.concat\(\{(.*?)\}, \"\|\"\)", text, re.S)
        assert len(keys) == 1
        assert "uri or var.request_uri" in keys[0]
        assert 'return key_of(var, "*")' in text


def test_only_the_control_plane_gets_the_hop_key(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    key = hop_key(settings.secret_key.get_secret_value())  # type: ignore[union-attr]
    proxied = {n: b for n, b in locations(render_config(settings)).items() if "proxy_pass" in b}
    for name, body in proxied.items():
        if name == "= /_auth/board":
            continue  # the hook gets only the headers it lists
        to_board = "$board_upstream" in body
        expected = '""' if to_board else f'"{key}"'
        assert f"proxy_set_header {HOP_HEADER} {expected};" in body, name
    assert key not in "".join(b for b in proxied.values() if "$board_upstream" in b)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_forwarded_for_counts_only_with_nginxs_hop_key(
    client: TestClient, settings: Settings, factory: sessionmaker[Session]
) -> None:
    """A peer that is not tbhub's nginx (any process on the host) cannot pick its address."""
    context = client.app.state.context  # type: ignore[attr-defined]
    seen: list[str] = []
    context.sign_ins.failed = lambda name, address: seen.append(address)
    key = hop_key(settings.secret_key.get_secret_value())  # type: ignore[union-attr]
    for headers in ({"X-Forwarded-For": "203.0.113.9"},
                    {"X-Forwarded-For": "203.0.113.9", HOP_HEADER: "guess"},
                    {"X-Forwarded-For": "198.51.100.4", HOP_HEADER: key}):  # fmt: skip
        data = {"username": "x", "password": "y", "csrf_token": form_token(client)}
        client.post("/auth/login", data=data, headers=headers)
    assert seen == ["testclient", "testclient", "198.51.100.4"]


def failed_sign_in_addresses(server: TbhubServer) -> list[str]:
    with server.db() as session:
        rows = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "auth.sign_in_failed")
        ).all()
        return [row.detail["address"] for row in rows]


@pytest.mark.e2e
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # no database question
def test_through_real_nginx_forwarded_for_comes_from_trusted_proxies_only_and_tokens_in_urls_are_not_logged(  # noqa: E501
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(trusted_proxies='["127.0.0.1"]')
    server.start()
    # Through nginx, from a configured proxy: its X-Forwarded-For names the browser.
    via_nginx = server.client()
    data = {"username": "x", "password": "wrong", "csrf_token": form_token(via_nginx)}
    via_nginx.post("/auth/login", data=data, headers={"X-Forwarded-For": "203.0.113.5"})
    # Straight to the control plane from this host: whatever it claims, it is 127.0.0.1.
    direct = httpx.Client(base_url=f"http://127.0.0.1:{server.api_port}", timeout=10)
    server.clients.append(direct)
    data = {"username": "x", "password": "wrong", "csrf_token": form_token(direct)}
    direct.post("/auth/login", data=data, headers={"X-Forwarded-For": "198.51.100.7"})
    assert sorted(failed_sign_in_addresses(server)) == ["127.0.0.1", "203.0.113.5"]

    secrets = ["tbh_SECRETONE", "SECRETTWO", "SECRETTHREE", "tbh_SECRETFOUR", "SECRETFIVE",
               "SECRETSIX"]  # fmt: skip
    plain = server.client()
    plain.get(f"/api/v1/projects?token={secrets[0]}")
    plain.get(f"/boards/foo/?x=1&Access_Token={secrets[1]}")
    plain.get(f"/api/v1/projects?a=b;%74oken={secrets[2]}")
    plain.get("/api/v1/projects?q=1", headers={"Referer": f"http://h/p?k={secrets[3]}"})
    plain.get(f"/share/{secrets[4]}", headers={"Referer": f"http://h/share/{secrets[5]}"})
    plain.get("/healthz?marker=done")
    log = server.data_dir / "nginx" / "logs" / "nginx-access.log"
    wait_until(lambda: log.exists() and "marker=done" in log.read_text(), timeout=15,
               what="nginx to flush its access log")  # fmt: skip
    text = log.read_text()
    assert not [s for s in secrets if s in text], text
    assert text.count("?[redacted]") == 4 and text.count("/share/[redacted]") == 2
    assert "GET /api/v1/projects?q=1 HTTP/1.1" in text  # other queries are logged as sent
