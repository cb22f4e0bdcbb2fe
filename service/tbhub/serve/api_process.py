"""What every process that answers the control plane's HTTP does, the first one and each API
worker (serve/api_worker.py) alike: its metrics, uvicorn on the socket it is given, and the
boards read again when the supervisor has written.

A module of its own so that a worker imports these without `serve/server.py` and
`serve/duties.py`, which bring the supervisor, its board backends (docker), the watcher,
the monitor, nginx and migrations into a process that runs none of them.
"""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from tbhub.core.metrics import turn_off, use_directory
from tbhub.core.settings import Settings
from tbhub.http.deps import AppContext

# How long a process of the control plane keeps an idle connection from nginx open: longer
# than nginx keeps one in its upstreams' caches (`keepalive_timeout 60s` in
# nginx/tbhub.conf.j2), so nginx is always the side that closes. With uvicorn's default of
# 5 s, a request nginx sent down a connection the process was closing at that moment got
# a 502 (a POST is never sent again).
API_KEEP_ALIVE_SECONDS = 75


def run_api_server(app: Any, listener: socket.socket) -> None:
    """Answer the control plane's HTTP on `listener` until stopped: the first process or a
    worker."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False,
                            timeout_keep_alive=API_KEEP_ALIVE_SECONDS)  # fmt: skip
    uvicorn.Server(config).run(sockets=[listener])


def start_metrics(settings: Settings, *, fresh: bool = True) -> None:
    """Before anything counts: every process of this server keeps its values under the data
    dir (prometheus-client's multiprocess mode), or none counts at all. `fresh`: the first
    process, which removes the files of an earlier run."""
    if settings.metrics_enabled:
        use_directory(settings.data_dir / "metrics", fresh=fresh)
    else:
        turn_off()


def board_observed(context: AppContext) -> None:
    """The supervisor wrote a change: the gate reads the boards again, and starting pages
    waiting on one answer now (api/board_state.py), in this process and in every API worker
    (which calls this in turn, its own `tell_workers` doing nothing)."""
    context.boards.invalidate()
    context.board_changes.notify()
    context.tell_workers()
