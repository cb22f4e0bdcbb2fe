"""The shipped nginx config: valid for the real nginx, and it clears identity headers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tbhub.core.settings import Settings
from tbhub.serve import nginx as nginx_module
from tbhub.serve.api_process import API_KEEP_ALIVE_SECONDS
from tbhub.serve.nginx import (
    IDENTITY_HEADERS,
    find_nginx,
    lua_modules,
    render_config,
    write_config,
)


def make_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, secret_key="s" * 40, http_port=18999, api_port=18998)


def test_rendered_config_passes_nginx_t(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    conf = write_config(settings)
    prefix, error_log = str(tmp_path / "nginx"), str(tmp_path / "e.log")
    command = [find_nginx("nginx"), "-t", "-p", prefix, "-c", str(conf), "-e", error_log]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_proxied_location_clears_every_identity_header(tmp_path: Path) -> None:
    text = render_config(make_settings(tmp_path))
    locations = re.findall(r"location (.+?) \{\n(.*?)\n        \}", text, flags=re.S)
    proxied = {name.strip(): body for name, body in locations if "proxy_pass" in body}
    assert set(proxied) == {
        "= /_auth/board",
        '~ "^/boards/(?<board_project>[a-z0-9][a-z0-9-]{0,62})/$"',
        '~ "^/boards/(?<board_project>[a-z0-9][a-z0-9-]{0,62})(?:/.*)?$"',
        "= /metrics",
        '~ "^/api/v1/projects/[a-z0-9][a-z0-9-]{0,62}/runs/[0-9]+/files/"',
        '~ "^/api/v1/projects/[a-z0-9][a-z0-9-]{0,62}/runs/[0-9]+/contents/"',
        "@control_plane",
        "= /auth/login",
        "/",
    }
    assert "deny all;" in proxied["= /metrics"]
    downloads = '~ "^/api/v1/projects/[a-z0-9][a-z0-9-]{0,62}/runs/[0-9]+/contents/"'
    assert "proxy_max_temp_file_size 0;" in proxied[downloads]  # streamed, never spooled
    for name, body in proxied.items():
        if name == "= /_auth/board":
            # The hook gets only the headers listed for it, nothing a client adds.
            assert "proxy_pass_request_headers off;" in body
            continue
        for header in IDENTITY_HEADERS:
            assert f'proxy_set_header {header} "";' in body, (name, header)


def test_board_location_routes_by_the_hook_answer(tmp_path: Path) -> None:
    text = render_config(make_settings(tmp_path))
    # Through the pool of kept connections (Lua's balancer, installed by make test), with
    # the hook's answers kept in the workers' shared memory.
    assert lua_modules(find_nginx("nginx")), "install libnginx-mod-http-lua and lua-resty-core"
    assert 'access_by_lua_block { require("tbhub_gate").judge() }' in text
    assert "auth_request /_auth/board;" not in text and "proxy_cache tbhub_auth;" not in text
    assert "lua_shared_dict tbhub_auth_answers 10m;" in text
    assert "proxy_pass http://$board_pool;" in text
    pool = text.split("upstream tbhub_boards {", 1)[1].split("\n    }\n", 1)[0]
    assert "balancer_by_lua_block" in pool and "keepalive 128;" in pool
    assert "listen 127.0.0.1:18999;" in text
    assert "server 127.0.0.1:18998;" in text


def test_uploads_stream_through_with_a_one_chunk_body_limit(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    settings.upload_max_chunk_bytes = 5 << 20
    text = render_config(settings)
    body = text.split('/runs/[0-9]+/files/" {', 1)[1].split("}", 1)[0]
    assert "proxy_request_buffering off;" in body
    assert f"client_max_body_size {5 << 20};" in body
    assert "error_page 413 = @upload_too_large;" in body


def test_without_lua_boards_are_proxied_a_connection_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nginx_module, "lua_modules", lambda binary: [])
    settings = make_settings(tmp_path)
    text = render_config(settings)
    assert "proxy_pass http://$board_upstream;" in text
    assert "load_module" not in text and "tbhub_boards" not in text
    # The hook's answers through auth_request and nginx's cache of them instead.
    assert "auth_request_set $board_upstream $upstream_http_x_board_upstream;" in text
    assert "proxy_cache tbhub_auth;" in text and "_by_lua" not in text
    conf = write_config(settings)
    command = [find_nginx("nginx"), "-t", "-p", str(tmp_path / "nginx"), "-c", str(conf),
               "-e", str(tmp_path / "e.log")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_boards_get_no_forwarding_headers_and_the_control_plane_gets_them_all(
    tmp_path: Path,
) -> None:
    # A board reads none of them and parsed each on every request: cleared (so none a
    # client sent passes either), where the control plane gets nginx's own.
    text = render_config(make_settings(tmp_path))
    locations = dict(re.findall(r"location (.+?) \{\n(.*?)\n        \}", text, flags=re.S))
    forwarding = ("X-Forwarded-For", "X-Forwarded-Proto", "X-Request-ID")
    boards = [body for name, body in locations.items() if name.startswith('~ "^/boards/')]
    assert len(boards) == 2
    for body in boards:
        for header in forwarding:
            assert f'proxy_set_header {header} "";' in body, header
        assert "proxy_set_header Cookie $board_cookie;" in body
        assert "proxy_set_header Authorization $board_authorization;" in body
    for body in (locations["@control_plane"], locations["/"]):
        assert "proxy_set_header X-Forwarded-For $remote_addr;" in body
        assert "proxy_set_header X-Forwarded-Proto $scheme;" in body
        assert "proxy_set_header X-Request-ID $request_id;" in body


def test_regexes_are_compiled_to_machine_code(tmp_path: Path) -> None:
    # Every request goes through the regex maps and locations (and the log's maps).
    assert "\npcre_jit on;\n" in render_config(make_settings(tmp_path))


@pytest.mark.parametrize("workers", [1, 3])
def test_nginx_drops_an_idle_control_plane_connection_before_the_process_does(
    tmp_path: Path, workers: int
) -> None:
    """A process that closes a kept connection while nginx sends a request down it makes a
    502, so every upstream of the control plane lets its idle connections go first."""
    settings = make_settings(tmp_path)
    addresses = [settings.api_address, *(f"127.0.0.1:{20000 + n}" for n in range(workers - 1))]
    text = render_config(settings, api_addresses=addresses)
    upstreams = re.findall(r"upstream (tbhub_control_plane|tbhub_uploads|tbhub_sign_in) \{(.*?)\}",
                           text, re.S)  # fmt: skip
    assert len(upstreams) == (1 if workers == 1 else 3)
    for name, block in upstreams:
        timeout = re.search(r"keepalive_timeout (\d+)s;", block)
        assert timeout is not None, f"{name} keeps idle connections for nginx's default"
        assert int(timeout.group(1)) < API_KEEP_ALIVE_SECONDS, name
