"""`tbhub serve`: the control plane (uvicorn), the supervisor and the nginx master, together."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO

import uvicorn

from tbhub.db import upgrade
from tbhub.deps import AppContext
from tbhub.errors import ConfigError
from tbhub.jobs.runner import start_jobs
from tbhub.locks import LockHeld, hold_lock
from tbhub.main import build_context, create_app
from tbhub.nginx import NginxMaster
from tbhub.settings import Settings, prepare_runtime
from tbhub.storage.run_sink import DatabaseRunSink
from tbhub.storage.watcher import StorageWatcher, choose_mode
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.board_process import raise_open_file_limit
from tbhub.supervisor.loop import Supervisor, policy_from_settings
from tbhub.supervisor.state import Limits

log = logging.getLogger("tbhub")


def hold_data_dir_lock(data_dir: Path) -> IO[str]:
    """One `tbhub serve` per data dir: its supervisor is the only one to run boards there."""
    try:
        return hold_lock(data_dir / "serve.lock")
    except LockHeld as held:
        raise ConfigError(
            f"another `tbhub serve` (pid {held.holder}) uses {data_dir}; "
            "stop it first or point TBHUB_DATA_DIR elsewhere"
        ) from None


def start_watcher(
    settings: Settings, context: AppContext, *, on_change: Callable[[], None]
) -> StorageWatcher | None:
    """The storage watcher feeding the runs table, and the upload quota's byte counts."""
    if settings.watch_mode == "off":
        return None
    watcher = StorageWatcher(
        settings.storage,
        DatabaseRunSink(context.factory),
        mode=choose_mode(settings.storage, settings.watch_mode),
        poll_interval=settings.watch_poll_interval,
        on_change=on_change,
    )
    watcher.start()
    context.usage.watcher = watcher
    return watcher


def serve(settings: Settings, *, with_nginx: bool = True, lock: IO[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM. `lock` is the data-dir lock if the caller already holds it
    (`tbhub demo` takes it before it changes anything)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per health probe every few seconds per board says nothing an operator needs.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    prepare_runtime(settings)
    lock = lock or hold_data_dir_lock(settings.data_dir)
    upgrade(settings.db_url)
    raise_open_file_limit()

    backend = LocalBackend(
        state_dir=settings.data_dir / "boards",
        owner=str(settings.data_dir),
        tensorboard_bin=settings.tensorboard_bin,
        stop_grace=settings.board_stop_grace,
        zygote_dir=settings.data_dir / "zygote" if settings.board_launcher == "zygote" else None,
    )
    context = build_context(settings)
    supervisor = Supervisor(
        factory=context.factory,
        backend=backend,
        tracker=context.tracker,
        storage_root=str(settings.storage),
        idle_timeout=settings.idle_timeout,
        interval=settings.reconcile_interval,
        policy=policy_from_settings(settings),
        limits=Limits(memory_limit=int(settings.board_memory_limit) or None),
        probe_timeout=settings.board_probe_timeout,
        metrics=context.board_metrics,
    )
    context.wake_supervisor = supervisor.wake
    jobs = start_jobs(settings, context.factory)
    watcher = start_watcher(settings, context, on_change=jobs.notify_change)
    nginx = NginxMaster(settings) if with_nginx else None
    parts = (watcher, jobs, nginx)
    shutdown_hooks = (backend.close, *(part.stop for part in parts if part is not None))
    app = create_app(context, supervisor=supervisor, on_shutdown=shutdown_hooks)
    try:
        if nginx is not None:
            nginx.start()
            log.info("nginx listens on http://%s:%d", settings.http_host, settings.http_port)
        log.info("open %s", settings.public_url)
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=settings.api_port,
            log_level="warning",
            access_log=False,
            proxy_headers=False,
        )
    finally:
        log.info("tbhub serve stopped")
        for stop in shutdown_hooks:
            stop()
        lock.close()
