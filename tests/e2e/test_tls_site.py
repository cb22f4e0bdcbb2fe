"""The shipped TLS site (deploy/nginx/tbhub-tls.conf) in front of a real `tbhub serve`: pages,
sign-in and a board over HTTPS, Secure cookies, and the browser's own address in the audit
log (TBHUB_TRUSTED_PROXIES)."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tbhub.core.processes import ProcessRef, stop_group
from tbhub.serve.nginx import find_nginx
from tbhub.storage.sample_logs import write_project
from tests.deploy.sites import runnable_site
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import wait_for_board
from tests.forms import post_sign_in
from tests.ports import free_port

# The browser connects from another loopback address than the TLS site's own, so the test
# can tell the two apart in what tbhub records.
BROWSER_ADDRESS = "127.0.0.2"


@contextmanager
def running_site(directory: Path, *, https_port: int, http_port: int, replica: int
                 ) -> Iterator[Path]:  # fmt: skip
    """The site's nginx on loopback; yields its certificate."""
    config, cert = runnable_site(
        directory, https_port=https_port, http_port=http_port, replicas=[replica]
    )
    process = subprocess.Popen(
        [find_nginx("nginx"), "-p", str(directory), "-c", str(config),
         "-e", str(directory / "error.log")],
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    ref = ProcessRef.of(process.pid)
    try:

        def listening() -> bool:
            assert process.poll() is None, (directory / "error.log").read_text()
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", https_port)) == 0

        wait_until(listening, timeout=10, what="the TLS site to listen")
        yield cert
    finally:
        stop_group(ref, grace=5, signals=(signal.SIGQUIT, signal.SIGKILL))
        process.wait(timeout=5)


def test_the_tls_site_serves_tbhub_over_https_with_secure_cookies_and_real_addresses(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    https_port, http_port = free_port(), free_port()
    server = make_server(
        public_url=f"https://127.0.0.1:{https_port}", trusted_proxies='["127.0.0.1"]'
    )
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=1, steps=10, tags=1)
    server.start()
    site = tmp_path / "site"
    site.mkdir()
    with running_site(site, https_port=https_port, http_port=http_port,
                      replica=server.http_port) as cert:  # fmt: skip
        plain = httpx.get(f"http://127.0.0.1:{http_port}/auth/login")
        assert plain.status_code == 301
        assert plain.headers["location"] == "https://127.0.0.1/auth/login"

        tls = ssl.create_default_context(cafile=str(cert))
        transport = httpx.HTTPTransport(verify=tls, local_address=BROWSER_ADDRESS)
        with httpx.Client(base_url=f"https://127.0.0.1:{https_port}", transport=transport,
                          timeout=10) as browser:  # fmt: skip
            signed_in = post_sign_in(browser, "alice", "alice-password")
            assert signed_in.status_code == 303, signed_in.text
            session_cookie = next(
                c for c in signed_in.headers.get_list("set-cookie") if "tbhub_session=" in c
            )
            assert session_cookie.startswith("__Host-tbhub_session=")
            assert "Secure" in session_cookie and "HttpOnly" in session_cookie
            assert "max-age=63072000" in signed_in.headers["strict-transport-security"]

            runs = wait_for_board(browser, "vision")  # through both nginx, and the auth hook
            assert runs.json() == ["run-00"]

    events = json.loads(server.cli("admin", "audit", "list", "--action", "auth.sign_in",
                                   "--json").stdout)  # fmt: skip
    sign_ins = [e for e in events if e["action"] == "auth.sign_in"]
    assert [e["detail"]["address"] for e in sign_ins] == [BROWSER_ADDRESS]
