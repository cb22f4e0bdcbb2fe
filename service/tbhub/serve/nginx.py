"""Render the nginx config tbhub ships and run an nginx master on it."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import jinja2

from tbhub.api.board_gate import BOARD_PATH_REGEX, UNSAFE_BOARD_PATH_REGEX
from tbhub.auth.caller import URL_TOKEN_PARAMS
from tbhub.core.errors import ConfigError
from tbhub.core.processes import ProcessRef, stop_group
from tbhub.core.resources import nginx_template
from tbhub.core.settings import Settings
from tbhub.domain.boards import AUTH_CACHE_SECONDS
from tbhub.http.proxy_hop import HOP_HEADER, hop_key
from tbhub.http.security_headers import BOARD_CSP
from tbhub.http.security_headers import COMMON as COMMON_HEADERS

# Every header name the hook, nginx or the boards use to carry identity or routing.
# nginx clears each of them on the way to an upstream, whatever the client sent.
IDENTITY_HEADERS = (
    "X-Board-Upstream",
    "X-Board-Scope",
    "X-Board-Project",
    "X-Board-User",
    "X-Tbhub-Original-Uri",
    "X-Tbhub-Original-Method",
    "X-Tbhub-User",
    "X-Tbhub-Role",
)
NGINX_STOP_SIGNALS = (signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL)


def nginx_dir(settings: Settings) -> Path:
    return settings.data_dir / "nginx"


def config_path(settings: Settings) -> Path:
    return nginx_dir(settings) / "nginx.conf"


def worker_user(data_dir: Path) -> str | None:
    """As root, nginx workers would drop to `nobody`, who cannot reach a private data dir
    for cache and temp files: run them as the data dir's owner instead."""
    if os.geteuid() != 0:
        return None
    stat = data_dir.stat()
    return f"{pwd.getpwuid(stat.st_uid).pw_name} {grp.getgrgid(stat.st_gid).gr_name}"


# A query parameter that may carry a token (case-insensitive; after `?`, `&` or `;`): a name
# tbhub refuses tokens in, a value that looks like one (`tbh_`), or anything percent-encoded
# that could decode to either. nginx logs such a query string as "[redacted]".
URL_TOKEN_REGEX = (
    r"(?:^|[?&;])(?:(?:" + "|".join(sorted(URL_TOKEN_PARAMS)) + r")(?:=|[&;]|$)"
    r"|[^&;=]*%[^&;=]*=|[^&;=]*=(?:tbh_|%))"
)


def nginx_quote(text: str) -> str:
    """Escape text for a double-quoted nginx string (which turns \\\\ into \\ and \\" into ")."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


LUA_MODULES = ("ndk_http_module.so", "ngx_http_lua_module.so")  # in this order
# Where Debian's lua-resty-core keeps `ngx.balancer`, the Lua module's required library.
LUA_PACKAGE_PATH = "/usr/share/lua/5.1/?.lua"
BOARD_KEEPALIVE = 128  # idle connections to boards nginx keeps, over all boards


def lua_modules(binary: str | None) -> list[str]:
    """The module files that give this nginx Lua's balancer, in load order; [] where it has
    none (libnginx-mod-http-lua and lua-resty-core are not installed): boards are then
    proxied with a connection per request."""
    if binary is None or not Path(LUA_PACKAGE_PATH.replace("?", "ngx/balancer")).is_file():
        return []
    try:
        version = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = re.search(r"--modules-path=(\S+)", version.stderr)
    modules = [Path(found.group(1)) / name for name in LUA_MODULES] if found else []
    return [str(m) for m in modules] if modules and all(m.is_file() for m in modules) else []


def render_config(settings: Settings, api_addresses: Sequence[str] = ()) -> str:
    """`api_addresses`: the control plane's processes (the first and its API workers)."""
    template_text = nginx_template().read_text()
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["nginx_quote"] = nginx_quote
    template = environment.from_string(template_text)
    base = nginx_dir(settings)
    assert settings.secret_key is not None, "call settings.prepare_runtime first"
    return template.render(
        # One worker: nginx only proxies, far faster than any board it fronts, and more
        # workers compete with the boards for the host's cores (bench/warm_throughput.py).
        worker_processes=1,
        worker_user=worker_user(settings.data_dir),
        run_dir=base,
        log_dir=base / "logs",
        tmp_dir=base / "tmp",
        cache_dir=base / "cache",
        api_addresses=list(api_addresses) or [settings.api_address],
        http_address=settings.http_address,
        auth_cache_seconds=AUTH_CACHE_SECONDS,
        identity_headers=IDENTITY_HEADERS,
        board_csp=BOARD_CSP,
        board_domain=settings.board_domain,
        security_headers=COMMON_HEADERS,
        board_path_regex=BOARD_PATH_REGEX,
        unsafe_board_path_regex=UNSAFE_BOARD_PATH_REGEX,
        upload_max_body=settings.upload_max_chunk_bytes,
        trusted_proxies=settings.trusted_proxies,
        url_token_regex=URL_TOKEN_REGEX,
        hop_header=HOP_HEADER,
        hop_key=hop_key(settings.secret_key.get_secret_value()),
        lua_modules=lua_modules(which_nginx(settings.nginx_bin)),
        lua_package_path=LUA_PACKAGE_PATH,
        board_keepalive=BOARD_KEEPALIVE,
        board_answer_seconds=settings.board_answer_cache_seconds,
    )


def write_config(settings: Settings, api_addresses: Sequence[str] = ()) -> Path:
    base = nginx_dir(settings)
    for sub in ("logs", "tmp", "cache"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    path = config_path(settings)
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)  # it holds the key nginx proves its hop with (proxy_hop.py)
    tmp.chmod(0o600)
    tmp.write_text(render_config(settings, api_addresses))
    os.replace(tmp, path)
    return path


def which_nginx(binary: str) -> str | None:
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin")


def find_nginx(binary: str) -> str:
    found = which_nginx(binary)
    if found is None:
        raise ConfigError(
            f"nginx not found (TBHUB_NGINX_BIN={binary!r}); install it with "
            "`sudo apt-get install nginx`, or run `tbhub serve --no-nginx`"
        )
    return found


class NginxMaster:
    """The nginx master tbhub runs, tracked by PID and start time in `master.json`."""

    def __init__(self, settings: Settings, api_addresses: Sequence[str] = ()) -> None:
        self.settings = settings
        self.api_addresses = list(api_addresses)
        self.binary = find_nginx(settings.nginx_bin)
        self.conf = config_path(settings)
        self.record = nginx_dir(settings) / "master.json"
        self._child: subprocess.Popen[bytes] | None = None
        self._ref: ProcessRef | None = None

    def _command(self, *extra: str) -> list[str]:
        base = nginx_dir(self.settings)
        error_log = str(base / "logs" / "nginx-error.log")
        return [self.binary, "-p", str(base), "-c", str(self.conf), "-e", error_log, *extra]

    def check(self) -> None:
        result = subprocess.run(self._command("-t", "-q"), capture_output=True, text=True)
        if result.returncode != 0:
            raise ConfigError(
                f"nginx refused the rendered config {self.conf}: {result.stderr.strip()}"
            )

    def stop_stale(self) -> None:
        """Stop an nginx master a previous `tbhub serve` on this data dir left behind."""
        try:
            ref = ProcessRef(**json.loads(self.record.read_text()))
        except (OSError, ValueError, TypeError):
            return
        if ref.is_alive():
            stop_group(ref, grace=5.0, signals=NGINX_STOP_SIGNALS)
        self.record.unlink(missing_ok=True)

    def start(self, wait: float = 10.0) -> None:
        write_config(self.settings, self.api_addresses)
        self.check()
        self.stop_stale()
        self._child = subprocess.Popen(
            self._command(), stdin=subprocess.DEVNULL, start_new_session=True
        )
        self._ref = ref = ProcessRef.of(self._child.pid)
        self.record.write_text(json.dumps({"pid": ref.pid, "create_time": ref.create_time}))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self._child.poll() is not None:
                raise ConfigError(
                    f"nginx exited at start (code {self._child.returncode}); read "
                    f"{nginx_dir(self.settings) / 'logs' / 'nginx-error.log'}"
                )
            if _accepts(self.settings.http_host, self.settings.http_port):
                return
            time.sleep(0.05)
        raise ConfigError(f"nginx did not listen on {self.settings.http_address}")

    def stop(self) -> None:
        if self._child is None or self._ref is None:
            return
        stop_group(self._ref, grace=5.0, signals=NGINX_STOP_SIGNALS)
        self._child.wait(timeout=5)
        self._child = self._ref = None
        self.record.unlink(missing_ok=True)


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
